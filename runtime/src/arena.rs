//! Carving typed, aligned slices out of one caller-provided byte arena, without `unsafe`.

/// A bump allocator over `&mut [u8]`. Also usable in "dry run" mode (no buffer) to compute
/// how many bytes a layout needs.
pub struct Arena<'a> {
    buf: &'a mut [u8],
    needed: usize,
}

impl<'a> Arena<'a> {
    /// An arena over `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Self { buf, needed: 0 }
    }

    /// Bytes a layout has asked for so far, padding included, assuming the worst start
    /// alignment. Valid even after an allocation failed.
    pub fn needed(&self) -> usize {
        self.needed
    }

    /// Takes `n` zeroed elements of `T`, or `None` if the arena is exhausted (the request is
    /// still counted in [`Arena::needed`]).
    pub fn take<T: bytemuck::Pod>(&mut self, n: usize) -> Option<&'a mut [T]> {
        // Nothing to place, so no alignment padding to count either: a layout with an empty
        // part (an f32 session's Q8 activation blocks) needs exactly what it would without it.
        if n == 0 {
            return Some(&mut []);
        }
        let size = core::mem::size_of::<T>().checked_mul(n)?;
        let align = core::mem::align_of::<T>();
        // Worst case padding so that `needed` does not depend on where the arena starts.
        self.needed = self.needed.saturating_add(size).saturating_add(align - 1);
        let buf = core::mem::take(&mut self.buf);
        let pad = buf.as_ptr().align_offset(align);
        if pad.checked_add(size)? > buf.len() {
            self.buf = buf;
            return None;
        }
        let (_, rest) = buf.split_at_mut(pad);
        let (mine, rest) = rest.split_at_mut(size);
        self.buf = rest;
        mine.fill(0);
        bytemuck::try_cast_slice_mut(mine).ok()
    }
}
