//! The serial protocol (`docs/serial-protocol.md`), shared by the firmware and the host client
//! (`loglinear serial`): line framing over any [`embedded_io::Read`], command parsing, reply
//! codes, the `GEN`/`RESET` parameters ([`request`]) and the byte escapes of prompts and `TOK`
//! lines ([`escaped`], [`request::unescape`]).
//!
//! Nothing here can panic on any input: no indexing, no `unwrap`, fixed buffers, no heap.
#![no_std]
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use embedded_io::{Read, Write};

pub mod decimal;
pub mod request;

/// Longest request line: bytes before its newline (a `\r` included). Longer lines are discarded
/// up to their newline and answered with [`ErrCode::TooLong`].
pub const MAX_LINE: usize = 512;
/// The line buffer: a whole line and its newline.
const BUF: usize = MAX_LINE + 1;

/// `ERR` reply codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrCode {
    /// The line is longer than [`MAX_LINE`].
    TooLong = 1,
    /// The line is not UTF-8.
    NotUtf8 = 2,
    /// Unknown command word.
    UnknownCommand = 3,
    /// A parameter is malformed, unknown or out of range.
    BadParam = 4,
    /// End of input in the middle of a line: the partial line is not run.
    CutShort = 5,
    /// The model or session failed (should not happen with a valid image).
    Runtime = 6,
    /// A snapshot could not be stored or loaded (`SAVE`, `LOAD`, `RESTORE`): the reason.
    Snapshot = 7,
}

/// What [`LineReader::next_line`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// A whole line, without `\n` (and without a `\r` before it).
    Complete(&'a mut [u8]),
    /// A line longer than [`MAX_LINE`], skipped up to and including its newline.
    TooLong,
    /// End of input after a partial line (discarded).
    CutShort,
    /// End of input at a line boundary.
    Eof,
    /// The transport reported an error.
    Io,
}

/// Splits a byte stream into lines, in a fixed-capacity buffer (a `heapless::Vec`: the bytes
/// received and not yet returned as lines).
pub struct LineReader {
    buf: heapless::Vec<u8, BUF>,
    /// Bytes at the start of `buf` that belong to the line returned last.
    consumed: usize,
    /// Inside an oversized line: drop bytes until its newline.
    discarding: bool,
}

impl Default for LineReader {
    fn default() -> Self {
        Self::new()
    }
}

impl LineReader {
    /// An empty reader (`const`, so a firmware can keep it in a static).
    pub const fn new() -> Self {
        Self {
            buf: heapless::Vec::new(),
            consumed: 0,
            discarding: false,
        }
    }

    /// The next line from `src`; blocks until a newline, end of input or an error.
    pub fn next_line<R: Read>(&mut self, src: &mut R) -> Line<'_> {
        // Drop the line returned last; keep what followed it.
        let consumed = self.consumed.min(self.buf.len());
        let kept = self.buf.len() - consumed;
        self.buf.copy_within(consumed.., 0);
        self.buf.truncate(kept);
        self.consumed = 0;
        let mut scanned = 0;
        loop {
            let unscanned = self.buf.get(scanned..).unwrap_or(&[]);
            if let Some(i) = unscanned.iter().position(|&b| b == b'\n') {
                let end = scanned + i;
                self.consumed = end + 1;
                if self.discarding {
                    self.discarding = false;
                    return Line::TooLong;
                }
                let cr = end > 0 && self.buf.get(end - 1) == Some(&b'\r');
                let len = if cr { end - 1 } else { end };
                return Line::Complete(self.buf.get_mut(..len).unwrap_or(&mut []));
            }
            scanned = self.buf.len();
            if self.buf.is_full() {
                // Full without a newline: the line is too long; skip the rest of it.
                self.discarding = true;
                self.buf.clear();
                scanned = 0;
            }
            // Read into the free capacity: zero-filled to a slice, then cut back to what came.
            let filled = self.buf.len();
            if self.buf.resize(BUF, 0).is_err() {
                return Line::Io;
            }
            let read = src.read(self.buf.get_mut(filled..).unwrap_or(&mut []));
            let n = match read {
                Ok(n) => n.min(BUF - filled),
                Err(_) => {
                    self.buf.truncate(filled);
                    return Line::Io;
                }
            };
            self.buf.truncate(filled + n);
            if n == 0 {
                let partial = filled > 0 || self.discarding;
                self.buf.clear();
                self.discarding = false;
                return if partial { Line::CutShort } else { Line::Eof };
            }
        }
    }
}

/// A parsed request line.
#[derive(Debug, PartialEq, Eq)]
pub enum Command<'a> {
    /// `GEN <params> [prompt=<escaped text>]`: the arguments, parsed by `request::parse_gen`.
    Gen(&'a mut [u8]),
    /// `STATUS`.
    Status,
    /// `RESET [levels=L]`: the arguments.
    Reset(&'a str),
    /// `QUIT`.
    Quit,
    /// `SNAP`: the session snapshot, hex-encoded (`snapshot::reply_snap`).
    Snap,
    /// `SAVE`: the session into the board's A/B snapshot store.
    Save,
    /// `LOAD`: the session from the newest valid slot of the store.
    Load,
    /// `RESTORE bytes=<n>`: an uploaded snapshot follows (`HEX` lines, then `END`).
    Restore(&'a str),
    /// A blank line: ignored.
    Blank,
}

/// Why a line is not a command.
#[derive(Debug, PartialEq, Eq)]
pub enum CommandError<'a> {
    NotUtf8,
    Unknown(&'a str),
    /// A command without arguments got some.
    UnexpectedArgs(&'static str),
}

/// Parses one line (without its newline). `line` is mutable because `GEN` unescapes its
/// prompt in place.
pub fn parse_command(line: &mut [u8]) -> Result<Command<'_>, CommandError<'_>> {
    if core::str::from_utf8(line).is_err() {
        return Err(CommandError::NotUtf8);
    }
    let word_end = line.iter().position(|&b| b == b' ').unwrap_or(line.len());
    let (word, rest) = line.split_at_mut(word_end);
    let args = rest.get_mut(1..).unwrap_or(&mut []);
    let args_blank = args.iter().all(|b| b.is_ascii_whitespace());
    match &*word {
        b"GEN" => Ok(Command::Gen(args)),
        b"STATUS" if args_blank => Ok(Command::Status),
        b"STATUS" => Err(CommandError::UnexpectedArgs("STATUS")),
        b"RESET" => Ok(Command::Reset(
            core::str::from_utf8(args).map_err(|_| CommandError::NotUtf8)?,
        )),
        b"QUIT" if args_blank => Ok(Command::Quit),
        b"QUIT" => Err(CommandError::UnexpectedArgs("QUIT")),
        b"SNAP" if args_blank => Ok(Command::Snap),
        b"SNAP" => Err(CommandError::UnexpectedArgs("SNAP")),
        b"SAVE" if args_blank => Ok(Command::Save),
        b"SAVE" => Err(CommandError::UnexpectedArgs("SAVE")),
        b"LOAD" if args_blank => Ok(Command::Load),
        b"LOAD" => Err(CommandError::UnexpectedArgs("LOAD")),
        b"RESTORE" => Ok(Command::Restore(
            core::str::from_utf8(args).map_err(|_| CommandError::NotUtf8)?,
        )),
        b"" if args_blank => Ok(Command::Blank),
        w => Err(CommandError::Unknown(
            core::str::from_utf8(w).unwrap_or("?"),
        )),
    }
}

/// Writes `ERR <code> <message>\n`. Write errors are ignored: there is no one to tell.
pub fn reply_err<W: Write>(out: &mut W, code: ErrCode, msg: core::fmt::Arguments<'_>) {
    let _ = writeln!(out, "ERR {} {}", code as u8, msg);
    let _ = out.flush();
}

/// Writes one token's `TOK <id> <escaped bytes>\n` line: the bytes the token stands for (one
/// for a byte-level vocabulary, any number for BPE), each as [`escaped`] writes it. A token that
/// stands for no bytes gets no field: `TOK <id>\n`.
pub fn reply_tok<W: Write>(out: &mut W, id: u32, bytes: &[u8]) {
    let _ = write!(out, "TOK {id}");
    if !bytes.is_empty() {
        let _ = out.write_all(b" ");
    }
    for &b in bytes {
        let _ = out.write_all(escaped(b).as_bytes());
    }
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

/// One byte as the protocol's text writes it: itself when it is a graphic ASCII character other
/// than `\`; `\n`, `\t`, `\r`, `\\`; otherwise `\xHH` (a space is `\x20`, since `TOK`
/// fields are separated by spaces; a prompt, which takes the rest of its line, may keep its
/// spaces as they are). [`request::unescape`] reads all of these back.
pub fn escaped(b: u8) -> Escaped {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let (bytes, len) = match b {
        b'\n' => (*b"\\n\0\0", 2),
        b'\t' => (*b"\\t\0\0", 2),
        b'\r' => (*b"\\r\0\0", 2),
        b'\\' => (*b"\\\\\0\0", 2),
        b if b.is_ascii_graphic() => ([b, 0, 0, 0], 1),
        b => {
            let hex = |n: u8| HEX.get(usize::from(n & 0x0f)).copied().unwrap_or(b'0');
            ([b'\\', b'x', hex(b >> 4), hex(b)], 4)
        }
    };
    Escaped { bytes, len }
}

/// The text of one escaped byte (1, 2 or 4 ASCII bytes), from [`escaped`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Escaped {
    bytes: [u8; 4],
    len: usize,
}

impl Escaped {
    /// The escape's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or(&self.bytes)
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)] // a test may panic: that is its failure
mod tests {
    use super::*;

    #[test]
    fn every_byte_escapes_and_reads_back() {
        for b in 0..=255u8 {
            let e = escaped(b);
            let text = e.as_bytes();
            assert!(
                text.iter().all(u8::is_ascii_graphic),
                "{b:#04x} -> {text:?}"
            );
            let mut buf = [0u8; 4];
            buf[..text.len()].copy_from_slice(text);
            assert_eq!(request::unescape(&mut buf[..text.len()]), Ok(1), "{b:#04x}");
            assert_eq!(buf[0], b);
        }
        assert_eq!(escaped(b' ').as_bytes(), b"\\x20");
        assert_eq!(escaped(b'\n').as_bytes(), b"\\n");
        assert_eq!(escaped(b'A').as_bytes(), b"A");
        assert_eq!(escaped(0xff).as_bytes(), b"\\xff");
    }
}
