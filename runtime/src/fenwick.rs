//! The Fenwick level state of one layer and its exact decode step (spec §4.2).
//!
//! Storage is a caller-provided slice laid out `[level][head][dk][dv]` (the golden files'
//! layout), in f32 or f16 ([`StateElem`]). Arithmetic is always f32; f16 only narrows what is
//! stored between steps.

use crate::half_convert;
use crate::level::LevelPolicy;
use crate::state_kernels::{self, RowOp};

/// A scalar type the state can be stored in.
pub trait StateElem: Copy + Default + bytemuck::Pod + 'static {
    /// Short name for reports ("f32", "f16").
    const NAME: &'static str;
    /// Widen to f32.
    fn load(self) -> f32;
    /// Narrow from f32 (round to nearest even).
    fn store(x: f32) -> Self;
    /// Whether the fused steps should use the wide column blocks (`WIDE_BLOCK` columns
    /// rather than `BLOCK`): worth it where a block conversion has a fixed cost per call to
    /// spread (f16 on hosts where `half` converts slices with vector instructions); elsewhere
    /// the narrow blocks keep the stack small and the block in registers.
    const WIDE_BLOCKS: bool = false;

    /// Widens `src` into `dst`, of the same length. The fused steps move the state through
    /// this a block of columns at a time, so that f32 storage is plain copies and f16 storage
    /// converts a block per call (with `half`'s vector conversions where it has them) instead
    /// of element by element.
    #[inline(always)]
    fn load_slice(src: &[Self], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = s.load();
        }
    }

    /// Narrows `src` into `dst`, of the same length, then leaves in `src` the values as stored
    /// (narrowed and widened again): what a later read of the state would see.
    #[inline(always)]
    fn store_slice(src: &mut [f32], dst: &mut [Self]) {
        for (s, d) in src.iter_mut().zip(dst.iter_mut()) {
            *d = Self::store(*s);
            *s = d.load();
        }
    }

    /// [`load_slice`](Self::load_slice) of the first `W` elements of `src` (`dst` is left as it
    /// is if `src` is shorter).
    #[inline(always)]
    fn load_block<const W: usize>(src: &[Self], dst: &mut [f32; W]) {
        if let Some(src) = src.get(..W) {
            Self::load_slice(src, dst);
        }
    }

    /// Whether [`kernel_pass`](Self::kernel_pass) can run in this build.
    const KERNEL: bool = false;

    /// One level's pass of the fused step over a block of [`state_kernels::COLS`] columns in
    /// the core's own instructions ([`state_kernels::level_pass`]); `None`, touching nothing,
    /// where this type and build have no kernel or the arguments do not fit it.
    #[inline(always)]
    fn kernel_pass(
        s: &mut [Self],
        stride: usize,
        k: &[f32],
        q: &[f32],
        lam: f32,
        op: RowOp<'_>,
        out: &mut [f32; state_kernels::COLS],
    ) -> Option<()> {
        let _ = (s, stride, k, q, lam, op, out);
        None
    }

    /// The merge of [`state_kernels::COLS`] columns in the core's own instructions
    /// ([`state_kernels::merge_block`]); `None`, touching nothing, where there is no kernel.
    #[inline(always)]
    fn kernel_merge(low: &[Self], levels: usize, level_len: usize, dst: &mut [Self]) -> Option<()> {
        let _ = (low, levels, level_len, dst);
        None
    }

    /// [`store_slice`](Self::store_slice) into the first `W` elements of `dst` (nothing is done
    /// if `dst` is shorter).
    #[inline(always)]
    fn store_block<const W: usize>(src: &mut [f32; W], dst: &mut [Self]) {
        if let Some(dst) = dst.get_mut(..W) {
            Self::store_slice(src, dst);
        }
    }
}

impl StateElem for f32 {
    const NAME: &'static str = "f32";
    #[inline(always)]
    fn load(self) -> f32 {
        self
    }
    #[inline(always)]
    fn store(x: f32) -> Self {
        x
    }
    #[inline(always)]
    fn load_slice(src: &[Self], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
    #[inline(always)]
    fn store_slice(src: &mut [f32], dst: &mut [Self]) {
        // f32 storage keeps the value exactly: nothing to read back.
        dst.copy_from_slice(src);
    }
    const KERNEL: bool = state_kernels::AVAILABLE;
    #[inline(always)]
    fn kernel_pass(
        s: &mut [Self],
        stride: usize,
        k: &[f32],
        q: &[f32],
        lam: f32,
        op: RowOp<'_>,
        out: &mut [f32; state_kernels::COLS],
    ) -> Option<()> {
        state_kernels::level_pass(s, stride, k, q, lam, op, out)
    }
    #[inline(always)]
    fn kernel_merge(low: &[Self], levels: usize, level_len: usize, dst: &mut [Self]) -> Option<()> {
        state_kernels::merge_block(low, levels, level_len, dst)
    }
}

impl StateElem for half::f16 {
    const NAME: &'static str = "f16";
    // `half` has vector slice conversions on these (F16C, fp16; chosen at run time with
    // `std`); the boards' cores convert a value per instruction or in software whatever the
    // block, so the narrow blocks cost nothing there.
    const WIDE_BLOCKS: bool = cfg!(any(
        target_arch = "x86",
        target_arch = "x86_64",
        target_arch = "aarch64"
    ));
    #[inline(always)]
    fn load(self) -> f32 {
        half_convert::widen(self)
    }
    #[inline(always)]
    fn store(x: f32) -> Self {
        half_convert::narrow(x)
    }
    #[inline(always)]
    fn load_slice(src: &[Self], dst: &mut [f32]) {
        half_convert::widen_slice(src, dst);
    }
    #[inline(always)]
    fn store_slice(src: &mut [f32], dst: &mut [Self]) {
        half_convert::narrow_slice_read_back(src, dst);
    }
    const KERNEL: bool = state_kernels::AVAILABLE;
    #[inline(always)]
    fn kernel_pass(
        s: &mut [Self],
        stride: usize,
        k: &[f32],
        q: &[f32],
        lam: f32,
        op: RowOp<'_>,
        out: &mut [f32; state_kernels::COLS],
    ) -> Option<()> {
        state_kernels::level_pass(s, stride, k, q, lam, op, out)
    }
    #[inline(always)]
    fn kernel_merge(low: &[Self], levels: usize, level_len: usize, dst: &mut [Self]) -> Option<()> {
        state_kernels::merge_block(low, levels, level_len, dst)
    }
}

/// The per-level states of one layer: `levels × heads` matrices of `dk × dv`.
pub struct FenwickState<'a, E: StateElem> {
    data: &'a mut [E],
    policy: LevelPolicy,
    heads: usize,
    dk: usize,
    dv: usize,
}

/// Number of elements a [`FenwickState`] needs.
pub const fn state_len(levels: usize, heads: usize, dk: usize, dv: usize) -> usize {
    levels * heads * dk * dv
}

impl<'a, E: StateElem> FenwickState<'a, E> {
    /// Wraps `data`, which must hold exactly [`state_len`] elements; `None` otherwise.
    pub fn new(
        data: &'a mut [E],
        policy: LevelPolicy,
        heads: usize,
        dk: usize,
        dv: usize,
    ) -> Option<Self> {
        if data.len() != state_len(policy.levels(), heads, dk, dv) {
            return None;
        }
        Some(Self {
            data,
            policy,
            heads,
            dk,
            dv,
        })
    }

    /// The capacity policy.
    pub fn policy(&self) -> LevelPolicy {
        self.policy
    }

    #[inline]
    fn level_len(&self) -> usize {
        self.heads * self.dk * self.dv
    }

    #[inline]
    fn matrix_range(&self, level: u32, head: usize) -> core::ops::Range<usize> {
        let m = self.dk * self.dv;
        let start = level as usize * self.level_len() + head * m;
        start..start + m
    }

    /// The stored `dk × dv` matrix of one level and head (row-major, dk rows).
    pub fn matrix(&self, level: u32, head: usize) -> &[E] {
        &self.data[self.matrix_range(level, head)]
    }

    /// All stored elements, `[level][head][dk][dv]`.
    pub fn as_slice(&self) -> &[E] {
        self.data
    }

    /// All stored elements, mutable (for loading a state handed over from a prefill).
    pub fn as_mut_slice(&mut self) -> &mut [E] {
        self.data
    }

    /// Zeroes every level.
    pub fn clear(&mut self) {
        self.data.fill(E::default());
    }

    /// Step 1 of §4.2 for all heads: before token `t`, levels `0..target` are added into
    /// `target` and zeroed. Levels below the target are all live, so no dead level is touched.
    pub fn merge(&mut self, t: u64) {
        let Some(target) = self.policy.merge_target(t) else {
            return;
        };
        let n = self.level_len();
        let target = target as usize;
        let (low, high) = self.data.split_at_mut(target * n);
        let dst = &mut high[..n];
        // A block of elements at a time, so that the sum over levels is a straight vector add
        // per level and f16 converts a block per call. Same order as the reference:
        // S[target] += (0 + S[0] + … + S[target-1]).
        let mut start = 0;
        if E::KERNEL {
            while start + state_kernels::COLS <= n
                && E::kernel_merge(&low[start..], target, n, &mut dst[start..]).is_some()
            {
                start += state_kernels::COLS;
            }
        }
        if E::WIDE_BLOCKS {
            while start + WIDE_BLOCK <= n {
                merge_block::<E, WIDE_BLOCK>(low, n, dst, start);
                start += WIDE_BLOCK;
            }
        }
        while start + BLOCK <= n {
            merge_block::<E, BLOCK>(low, n, dst, start);
            start += BLOCK;
        }
        while start < n {
            merge_block::<E, 1>(low, n, dst, start);
            start += 1;
        }
        low.fill(E::default());
    }

    /// Step 2 of §4.2, Mamba-2 form, one head: S ← α S on every level holding history
    /// ([`LevelPolicy::history_levels`]).
    ///
    /// The separate steps (this, [`transition_delta`](Self::transition_delta),
    /// [`insert`](Self::insert), [`read`](Self::read)) are the plain statement of §4.2, kept
    /// for tests and tools; the layers use the fused [`step_decay`](Self::step_decay) and
    /// [`step_delta`](Self::step_delta), which give the same bits in fewer passes.
    pub fn transition_decay(&mut self, t: u64, head: usize, alpha: f32) {
        for l in self.policy.history_levels(t) {
            let r = self.matrix_range(l, head);
            for s in &mut self.data[r] {
                *s = E::store(alpha * s.load());
            }
        }
    }

    /// Step 2 of §4.2, Gated DeltaNet form, one head: S ← α (S − β k (kᵀ S)) on every level
    /// holding history. `u` is scratch of at least `dv` floats.
    pub fn transition_delta(
        &mut self,
        t: u64,
        head: usize,
        alpha: f32,
        beta: f32,
        k: &[f32],
        u: &mut [f32],
    ) {
        let (dk, dv) = (self.dk, self.dv);
        let u = &mut u[..dv];
        for l in self.policy.history_levels(t) {
            let r = self.matrix_range(l, head);
            let s = &mut self.data[r];
            // u = kᵀ S (a dv-vector), then one pass S[i][j] = α (S[i][j] − β k[i] u[j]).
            u.fill(0.0);
            for i in 0..dk {
                let ki = k[i];
                for (uj, sij) in u.iter_mut().zip(&s[i * dv..(i + 1) * dv]) {
                    *uj += ki * sij.load();
                }
            }
            for i in 0..dk {
                let bk = beta * k[i];
                for (sij, uj) in s[i * dv..(i + 1) * dv].iter_mut().zip(u.iter()) {
                    *sij = E::store(alpha * (sij.load() - bk * uj));
                }
            }
        }
    }

    /// Step 3 of §4.2, one head: `S[0]` += β k vᵀ. After the merge level 0 is zero, so this is
    /// the spec's assignment; in the plain case it adds the token to the single state.
    pub fn insert(&mut self, head: usize, k: &[f32], v: &[f32], beta: f32) {
        let dv = self.dv;
        let r = self.matrix_range(0, head);
        let s = &mut self.data[r];
        for (i, &ki) in k.iter().enumerate().take(self.dk) {
            let bk = beta * ki;
            for (sij, &vj) in s[i * dv..(i + 1) * dv].iter_mut().zip(v) {
                *sij = E::store(sij.load() + bk * vj);
            }
        }
    }

    /// Step 4 of §4.2, one head: out = Σ_ℓ λ(ℓ) · `S[ℓ]`ᵀ q over the live levels only.
    pub fn read(
        &self,
        t: u64,
        head: usize,
        q: &[f32],
        lambda: impl Fn(u32) -> f32,
        out: &mut [f32],
    ) {
        let out = &mut out[..self.dv];
        out.fill(0.0);
        self.read_level(0, head, q, lambda(0), out);
        for l in self.policy.live_upper_levels(t) {
            self.read_level(l, head, q, lambda(l), out);
        }
    }

    #[inline]
    fn read_level(&self, level: u32, head: usize, q: &[f32], lam: f32, out: &mut [f32]) {
        let dv = self.dv;
        let s = &self.data[self.matrix_range(level, head)];
        for (i, &qi) in q.iter().enumerate().take(self.dk) {
            let w = lam * qi;
            for (o, sij) in out.iter_mut().zip(&s[i * dv..(i + 1) * dv]) {
                *o += w * sij.load();
            }
        }
    }
}

/// Columns the fused steps and the merge work on together. Every column of a state matrix is
/// independent in the transition, the insert and the readout, so a step runs one block of
/// columns at a time through all levels: the block's kᵀS, v and output are small fixed-size
/// arrays the compiler keeps in vector registers, instead of dv-long arrays that every row
/// reloads and stores. The stack cost is a few blocks (≈ 0.3 KiB), which matters on the
/// boards (a few KiB of stack in all). Columns beyond the last whole block go one at a time.
const BLOCK: usize = 16;

/// Columns per block for element types with [`StateElem::WIDE_BLOCKS`]: f16 through `half`'s
/// slice conversions pays a feature check and a call per conversion, which 64 columns
/// amortise (measured: `converter/examples/state_bench.rs`). About 1 KiB of stack.
const WIDE_BLOCK: usize = 64;

/// λ of every level, evaluated once per step (the caller's closure may be costly, e.g. a
/// softplus per call) instead of once per column block.
struct Lambdas([f32; 64]);

impl Lambdas {
    /// λ(ℓ) for level 0 and the levels in `levels`; the others stay 0 and are never read.
    fn new(levels: impl Iterator<Item = u32>, lambda: impl Fn(u32) -> f32) -> Self {
        let mut lam = [0.0f32; 64];
        lam[0] = lambda(0);
        for l in levels {
            if let Some(x) = lam.get_mut(l as usize) {
                *x = lambda(l);
            }
        }
        Self(lam)
    }

    #[inline(always)]
    fn get(&self, l: u32) -> f32 {
        self.0.get(l as usize).copied().unwrap_or(0.0)
    }
}

/// What a fused step does to the levels holding history.
#[derive(Clone, Copy)]
enum Transition {
    /// Gated DeltaNet: S ← α (S − β k (kᵀ S)).
    Delta { alpha: f32, beta: f32 },
    /// Mamba-2: S ← α S.
    Decay { alpha: f32 },
}

impl Transition {
    /// β of the insert S[0] += β k vᵀ: the gate for Gated DeltaNet, 1 for Mamba-2.
    #[inline(always)]
    fn insert_beta(self) -> f32 {
        match self {
            Self::Delta { beta, .. } => beta,
            Self::Decay { .. } => 1.0,
        }
    }
}

/// One head's token for a fused step ([`FenwickState::step_delta`],
/// [`FenwickState::step_decay`]): where it is, its key and query, its level weights, and the
/// buffer that brings its value in and takes the readout out.
pub struct HeadStep<'a, L> {
    /// The token's position.
    pub t: u64,
    /// The head.
    pub head: usize,
    /// The key, dk floats.
    pub k: &'a [f32],
    /// The query, dk floats.
    pub q: &'a [f32],
    /// λ(ℓ) of a level; called once per live level.
    pub lambda: L,
    /// v (dv floats) on entry, the readout on exit.
    pub v_out: &'a mut [f32],
}

/// What the passes over one column block of one head read, the same for every level.
#[derive(Clone, Copy)]
struct BlockInputs<'a> {
    tr: Transition,
    /// The head's key and query, dk floats each.
    k: &'a [f32],
    q: &'a [f32],
    /// Floats per row of a state matrix.
    dv: usize,
    /// The block's first column.
    j0: usize,
}

impl<E: StateElem> FenwickState<'_, E> {
    /// Steps 2–4 of §4.2 for one head, Gated DeltaNet form, fused: the transition
    /// S ← α (S − β k (kᵀ S)) on every level holding history, the insert `S[0]` += β k vᵀ and the
    /// readout Σ_ℓ λ(ℓ) `S[ℓ]`ᵀ q over the live levels. Call [`merge`](Self::merge) first, as
    /// with the separate steps. With `k` or `q` shorter than dk, or `v_out` shorter than dv,
    /// nothing is done.
    ///
    /// The result is bit-identical to `transition_delta`, `insert`, `read`: every sum is taken
    /// in the same order and the readout sees each level as stored (rounded to f16 for f16
    /// storage). The fused form passes over the state fewer times: a history level is read
    /// once for kᵀS, then read, updated, written and read out in one more pass (three passes
    /// in the separate steps); level 0 is inserted and read out in one pass (two).
    pub fn step_delta<L: Fn(u32) -> f32>(&mut self, step: HeadStep<'_, L>, alpha: f32, beta: f32) {
        self.fused_step(step, Transition::Delta { alpha, beta });
    }

    /// Steps 2–4 of §4.2 for one head, Mamba-2 form, fused: S ← α S on every level holding
    /// history, `S[0]` += k vᵀ, and the readout Σ_ℓ λ(ℓ) `S[ℓ]`ᵀ q over the live levels, in one
    /// read-modify-write pass per level (two in the separate steps). Call
    /// [`merge`](Self::merge) first.
    ///
    /// Bit-identical to `transition_decay`, `insert(.., 1.0)`, `read`, and with the same
    /// length rules, as [`step_delta`](Self::step_delta).
    pub fn step_decay<L: Fn(u32) -> f32>(&mut self, step: HeadStep<'_, L>, alpha: f32) {
        self.fused_step(step, Transition::Decay { alpha });
    }

    #[inline(always)]
    fn fused_step<L: Fn(u32) -> f32>(&mut self, step: HeadStep<'_, L>, tr: Transition) {
        let HeadStep {
            t,
            head,
            k,
            q,
            lambda,
            v_out,
        } = step;
        let (dk, dv) = (self.dk, self.dv);
        let (Some(k), Some(q), Some(v_out)) = (k.get(..dk), q.get(..dk), v_out.get_mut(..dv))
        else {
            return;
        };
        let lam = Lambdas::new(self.policy.history_levels(t), lambda);
        let mut inp = BlockInputs {
            tr,
            k,
            q,
            dv,
            j0: 0,
        };
        if E::KERNEL {
            while inp.j0 + state_kernels::COLS <= dv
                && self.kernel_block(t, head, inp, &lam, v_out).is_some()
            {
                inp.j0 += state_kernels::COLS;
            }
        }
        if E::WIDE_BLOCKS {
            while inp.j0 + WIDE_BLOCK <= dv {
                self.fused_block::<WIDE_BLOCK>(t, head, inp, &lam, v_out);
                inp.j0 += WIDE_BLOCK;
            }
        }
        while inp.j0 + BLOCK <= dv {
            self.fused_block::<BLOCK>(t, head, inp, &lam, v_out);
            inp.j0 += BLOCK;
        }
        while inp.j0 < dv {
            self.fused_block::<1>(t, head, inp, &lam, v_out);
            inp.j0 += 1;
        }
    }

    /// [`fused_block`](Self::fused_block) of [`state_kernels::COLS`] columns through
    /// [`StateElem::kernel_pass`]. `None`, before touching anything, where the kernel does not
    /// fit: a single level (transition, then insert, on one matrix), an odd row length or
    /// first column, or storage that is not 4-aligned. Once the first level fits, every level
    /// does: their matrices start an even number of elements apart.
    #[inline(always)]
    fn kernel_block(
        &mut self,
        t: u64,
        head: usize,
        inp: BlockInputs<'_>,
        lam: &Lambdas,
        v_out: &mut [f32],
    ) -> Option<()> {
        const W: usize = state_kernels::COLS;
        let BlockInputs { tr, k, q, dv, j0 } = inp;
        if self.policy.levels() == 1
            || dv % 2 != 0
            || j0 % 2 != 0
            || (self.data.as_ptr() as usize) % 4 != 0
        {
            return None;
        }
        let cols = j0..j0 + W;
        let v: [f32; W] = v_out.get(cols.clone())?.try_into().ok()?;
        let mut out = [0.0f32; W];
        let r = self.matrix_range(0, head);
        let insert = RowOp::Insert {
            beta: tr.insert_beta(),
            v: &v,
        };
        E::kernel_pass(
            &mut self.data[r.start + j0..r.end],
            dv,
            k,
            q,
            lam.get(0),
            insert,
            &mut out,
        )?;
        let op = match tr {
            Transition::Delta { alpha, beta } => RowOp::Delta { alpha, beta },
            Transition::Decay { alpha } => RowOp::Decay { alpha },
        };
        for l in self.policy.live_upper_levels(t) {
            let r = self.matrix_range(l, head);
            E::kernel_pass(
                &mut self.data[r.start + j0..r.end],
                dv,
                k,
                q,
                lam.get(l),
                op,
                &mut out,
            )?;
        }
        v_out[cols].copy_from_slice(&out);
        Some(())
    }

    /// Columns `j0..j0 + W` of one head through every live level. Level order and, within a
    /// level, row order are those of the separate steps, so each output is summed in the same
    /// order.
    #[inline(always)]
    fn fused_block<const W: usize>(
        &mut self,
        t: u64,
        head: usize,
        inp: BlockInputs<'_>,
        lam: &Lambdas,
        v_out: &mut [f32],
    ) {
        let cols = inp.j0..inp.j0 + W;
        let mut v = [0.0f32; W];
        v.copy_from_slice(&v_out[cols.clone()]);
        let mut out = [0.0f32; W];
        let r = self.matrix_range(0, head);
        if self.policy.levels() == 1 {
            // Level 0 holds the whole history: transition, then insert, then read.
            level_pass(&mut self.data[r], inp, Some(&v), lam.get(0), &mut out);
        } else {
            insert_pass(&mut self.data[r], inp, &v, lam.get(0), &mut out);
            for l in self.policy.live_upper_levels(t) {
                let r = self.matrix_range(l, head);
                level_pass(&mut self.data[r], inp, None, lam.get(l), &mut out);
            }
        }
        v_out[cols].copy_from_slice(&out);
    }
}

/// Columns `j0..j0 + W` of `dst` += those of every level in `low` (levels of `n` elements).
#[inline(always)]
fn merge_block<E: StateElem, const W: usize>(low: &[E], n: usize, dst: &mut [E], start: usize) {
    let mut acc = [0.0f32; W];
    let mut x = [0.0f32; W];
    for level in low.chunks_exact(n) {
        E::load_block(&level[start..], &mut x);
        for (a, &xi) in acc.iter_mut().zip(&x) {
            *a += xi;
        }
    }
    let d = &mut dst[start..];
    E::load_block(d, &mut x);
    for (xi, &a) in x.iter_mut().zip(&acc) {
        *xi += a;
    }
    E::store_block(&mut x, d);
}

/// One level's columns `j0..j0 + W` (rows of `dv` in `s`): the transition, then the insert
/// S += β k vᵀ when `insert` gives v (the plain single-level case), storing after each as the
/// separate steps do, and out += λ Sᵀ q on the stored values. The Gated DeltaNet transition
/// needs kᵀS of the whole column first: one read pass more.
#[inline(always)]
fn level_pass<E: StateElem, const W: usize>(
    s: &mut [E],
    inp: BlockInputs<'_>,
    insert: Option<&[f32; W]>,
    lam: f32,
    out: &mut [f32; W],
) {
    let BlockInputs { tr, k, q, dv, j0 } = inp;
    let mut x = [0.0f32; W];
    // u = kᵀ S over the block (GDN only), summed over rows in order, as `transition_delta`.
    let mut u = [0.0f32; W];
    if let Transition::Delta { .. } = tr {
        for (row, &ki) in s.chunks_exact(dv).zip(k) {
            E::load_block(&row[j0..], &mut x);
            for (uj, &xj) in u.iter_mut().zip(&x) {
                *uj += ki * xj;
            }
        }
    }
    for ((row, &ki), &qi) in s.chunks_exact_mut(dv).zip(k).zip(q) {
        let row = &mut row[j0..];
        E::load_block(row, &mut x);
        match tr {
            Transition::Delta { alpha, beta } => {
                let bk = beta * ki;
                for (xj, &uj) in x.iter_mut().zip(&u) {
                    *xj = alpha * (*xj - bk * uj);
                }
            }
            Transition::Decay { alpha } => {
                for xj in x.iter_mut() {
                    *xj *= alpha;
                }
            }
        }
        if let Some(v) = insert {
            E::store_block(&mut x, row);
            let bk = tr.insert_beta() * ki;
            for (xj, &vj) in x.iter_mut().zip(v) {
                *xj += bk * vj;
            }
        }
        E::store_block(&mut x, row);
        let wq = lam * qi;
        for (o, &xj) in out.iter_mut().zip(&x) {
            *o += wq * xj;
        }
    }
}

/// Level 0's columns `j0..j0 + W`: S += β k vᵀ and out += λ Sᵀ q, in one pass.
#[inline(always)]
fn insert_pass<E: StateElem, const W: usize>(
    s: &mut [E],
    inp: BlockInputs<'_>,
    v: &[f32; W],
    lam: f32,
    out: &mut [f32; W],
) {
    let BlockInputs { tr, k, q, dv, j0 } = inp;
    let beta = tr.insert_beta();
    let mut x = [0.0f32; W];
    for ((row, &ki), &qi) in s.chunks_exact_mut(dv).zip(k).zip(q) {
        let row = &mut row[j0..];
        E::load_block(row, &mut x);
        let bk = beta * ki;
        for (xj, &vj) in x.iter_mut().zip(v) {
            *xj += bk * vj;
        }
        E::store_block(&mut x, row);
        let wq = lam * qi;
        for (o, &xj) in out.iter_mut().zip(&x) {
            *o += wq * xj;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With 1×1 states, α = 1 and k = v = 1 every level's value is its token count, so the
    /// real merge code can be checked against the occupancy rule for long runs.
    fn run_counts(levels: usize, steps: u64, mut check: impl FnMut(u64, &[f32])) {
        let policy = LevelPolicy::new(levels).unwrap();
        let mut data = [0f32; 64];
        let mut st = FenwickState::new(&mut data[..levels], policy, 1, 1, 1).unwrap();
        for t in 0..steps {
            st.merge(t);
            st.transition_decay(t, 0, 1.0);
            st.insert(0, &[1.0], &[1.0], 1.0);
            check(t, st.as_slice());
        }
    }

    #[test]
    fn occupancy_follows_buckets_below_capacity() {
        run_counts(21, 1 << 16, |t, s| {
            assert_eq!(s[0], 1.0);
            for l in 1..21u32 {
                let want = if (t >> (l - 1)) & 1 == 1 {
                    (1u64 << (l - 1)) as f32
                } else {
                    0.0
                };
                assert_eq!(s[l as usize], want, "t={t} level={l}");
            }
        });
    }

    #[test]
    fn saturating_top_level_holds_everything_older() {
        let levels = 6; // top = 5: exact up to 32 tokens, saturating after
        let top = 5u32;
        run_counts(levels, 1000, |t, s| {
            let total: f32 = s.iter().sum();
            assert_eq!(total, (t + 1) as f32, "no token lost at t={t}");
            for l in 1..top {
                let want = if (t >> (l - 1)) & 1 == 1 {
                    (1u64 << (l - 1)) as f32
                } else {
                    0.0
                };
                assert_eq!(s[l as usize], want, "t={t} level={l}");
            }
            assert_eq!(
                s[top as usize],
                ((t >> (top - 1)) << (top - 1)) as f32,
                "t={t}"
            );
        });
    }
}
