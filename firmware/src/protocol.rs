//! The serial protocol (`docs/serial-protocol.md`): line framing over any
//! [`embedded_io::Read`], command parsing, reply codes and the byte escaping of `TOK` lines.
//!
//! Nothing here can panic on any input: no indexing, no `unwrap`, fixed buffers, no heap.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use embedded_io::{Read, Write};

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

/// Splits a byte stream into lines, in a fixed buffer.
pub struct LineReader {
    buf: [u8; BUF],
    /// Bytes of `buf` holding data.
    filled: usize,
    /// Bytes at the start of `buf` that belong to the line returned last.
    consumed: usize,
    /// Inside an oversized line: drop bytes until its newline.
    discarding: bool,
}

impl LineReader {
    pub const fn new() -> Self {
        Self {
            buf: [0; BUF],
            filled: 0,
            consumed: 0,
            discarding: false,
        }
    }

    /// The next line from `src`; blocks until a newline, end of input or an error.
    pub fn next_line<R: Read>(&mut self, src: &mut R) -> Line<'_> {
        // Drop the line returned last; keep what followed it.
        if self.consumed <= self.filled && self.filled <= self.buf.len() {
            self.buf.copy_within(self.consumed..self.filled, 0);
            self.filled -= self.consumed;
        } else {
            self.filled = 0;
        }
        self.consumed = 0;
        let mut scanned = 0;
        loop {
            let unscanned = self.buf.get(scanned..self.filled).unwrap_or(&[]);
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
            scanned = self.filled;
            if self.filled >= self.buf.len() {
                // Full without a newline: the line is too long; skip the rest of it.
                self.discarding = true;
                self.filled = 0;
                scanned = 0;
            }
            let Some(free) = self.buf.get_mut(self.filled..) else {
                return Line::Io;
            };
            match src.read(free) {
                Ok(0) => {
                    let partial = self.filled > 0 || self.discarding;
                    self.filled = 0;
                    self.discarding = false;
                    return if partial { Line::CutShort } else { Line::Eof };
                }
                Ok(n) => self.filled = (self.filled + n).min(self.buf.len()),
                Err(_) => return Line::Io,
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

/// Writes one token's `TOK <id> <escaped byte>\n` line. The byte is itself when it is a
/// graphic ASCII character other than `\`; `\n`, `\t`, `\r`, `\\`; otherwise `\xHH`
/// (a space is `\x20`). An id that is not a byte gets no byte field: `TOK <id>\n`.
pub fn reply_tok<W: Write>(out: &mut W, id: u32, byte: Option<u8>) {
    let _ = write!(out, "TOK {id}");
    let esc: &[u8] = match &byte {
        Some(b'\n') => b" \\n",
        Some(b'\t') => b" \\t",
        Some(b'\r') => b" \\r",
        Some(b'\\') => b" \\\\",
        Some(b) if b.is_ascii_graphic() => {
            let _ = out.write_all(b" ");
            core::slice::from_ref(b)
        }
        Some(b) => {
            let _ = write!(out, " \\x{b:02x}");
            b""
        }
        None => b"",
    };
    let _ = out.write_all(esc);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}
