//! What the `serial_protocol` fuzz target runs, shared with its replay test
//! (`tests/tests/fuzz_replay_checkpoint_serial.rs`), which include this file by path. The
//! protocol is the `loglinear-protocol` crate, the one the firmware runs.
//!
//! The input is a byte stream as it arrives on the serial port: its first byte picks the
//! sizes of the reads (a transport returns any number of bytes), the rest is the stream. Every
//! line is framed, parsed and, like the firmware does, answered; nothing may panic, and the
//! framing must agree with a plain split at newlines.

use loglinear_protocol::request::{parse_gen, parse_reset};
use loglinear_protocol::{parse_command, reply_err, reply_tok, Command, ErrCode, Line, LineReader};

/// The firmware's largest level count (`RESET levels=L` is checked against it).
const MAX_LEVELS: usize = 32;

/// A transport that returns the stream in reads of a few bytes.
struct Chunked<'a> {
    data: &'a [u8],
    /// Read sizes cycle through 1..=max_read.
    max_read: usize,
    next: usize,
}

impl embedded_io::ErrorType for Chunked<'_> {
    type Error = embedded_io::ErrorKind;
}

impl embedded_io::Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Self::Error> {
        self.next = self.next % self.max_read + 1;
        let n = self.next.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// Collects replies.
struct Sink(Vec<u8>);

impl embedded_io::ErrorType for Sink {
    type Error = embedded_io::ErrorKind;
}

impl embedded_io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Self::Error> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// Frames, parses and answers every line of the input.
pub fn exercise_serial_protocol(data: &[u8]) {
    let Some((&first, stream)) = data.split_first() else {
        return;
    };
    let mut src = Chunked {
        data: stream,
        max_read: usize::from(first % 64) + 1,
        next: 0,
    };
    let mut reader = LineReader::new();
    let mut out = Sink(Vec::new());
    let mut lines = 0usize;
    loop {
        match reader.next_line(&mut src) {
            Line::Complete(line) => {
                assert!(!line.contains(&b'\n'), "a line holds its newline");
                answer(line, &mut out);
            }
            Line::TooLong => reply_err(&mut out, ErrCode::TooLong, format_args!("too long")),
            Line::CutShort => reply_err(&mut out, ErrCode::CutShort, format_args!("cut short")),
            Line::Eof | Line::Io => break,
        }
        lines += 1;
        assert!(lines <= stream.len(), "more lines than bytes");
    }
    // Every reply is whole lines.
    assert!(out.0.is_empty() || out.0.ends_with(b"\n"));
}

/// Answers one line as the firmware does, without a model: `GEN` echoes the prompt as `TOK`s.
fn answer(line: &mut [u8], out: &mut Sink) {
    let len = line.len();
    match parse_command(line) {
        Ok(Command::Gen(args)) => match parse_gen(args) {
            Ok(p) => {
                assert!(p.tokens <= loglinear_protocol::request::MAX_TOKENS);
                assert!(p.temperature.is_finite() && p.temperature >= 0.0);
                assert!(p.top_p > 0.0 && p.top_p <= 1.0);
                for &b in p.prompt.unwrap_or(&[]) {
                    reply_tok(out, u32::from(b), &[b]);
                }
                assert!(p.prompt.is_none_or(|t| !t.is_empty() && t.len() <= len));
            }
            Err(e) => reply_err(out, ErrCode::BadParam, format_args!("{e}")),
        },
        Ok(Command::Reset(args)) => match parse_reset(args, MAX_LEVELS) {
            Ok(levels) => assert!(levels.is_none_or(|l| (1..=MAX_LEVELS).contains(&l))),
            Err(e) => reply_err(out, ErrCode::BadParam, format_args!("{e}")),
        },
        // RESTORE's `bytes=` and its HEX lines are parsed in firmware/src/snapshot.rs, which
        // needs the runtime; here only the command split is exercised.
        Ok(Command::Restore(args)) => assert!(args.len() <= len),
        Ok(
            Command::Status
            | Command::Quit
            | Command::Snap
            | Command::Save
            | Command::Load
            | Command::Blank,
        ) => {}
        Err(e) => reply_err(out, ErrCode::UnknownCommand, format_args!("{e:?}")),
    }
}
