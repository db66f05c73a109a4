//! The serial protocol crate (`loglinear-protocol`, which the firmware runs) on the host: line
//! framing over arbitrarily chunked input, and parsing of arbitrary bytes, never panic and
//! agree with a plain reference.

use loglinear_protocol::{self as protocol, request};

use proptest::prelude::*;
use protocol::{Command, Line, LineReader, MAX_LINE};

/// A byte source that returns the input in the given chunk sizes (then end of input).
struct Chunked<'a> {
    data: &'a [u8],
    sizes: Vec<usize>,
    next: usize,
}

impl embedded_io::ErrorType for Chunked<'_> {
    type Error = embedded_io::ErrorKind;
}

impl embedded_io::Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Self::Error> {
        let size = self.sizes.get(self.next).copied().unwrap_or(7).max(1);
        self.next += 1;
        let n = size.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

#[derive(Debug, PartialEq)]
enum Expect {
    Complete(Vec<u8>),
    TooLong,
    CutShort,
}

/// What the reader must return for `data`: the reference split.
fn reference(data: &[u8]) -> Vec<Expect> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        match rest.iter().position(|&b| b == b'\n') {
            Some(i) => {
                let line = &rest[..i];
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                out.push(if i > MAX_LINE {
                    Expect::TooLong
                } else {
                    Expect::Complete(line.to_vec())
                });
                rest = &rest[i + 1..];
            }
            None => {
                out.push(Expect::CutShort);
                rest = &[];
            }
        }
    }
    out
}

fn read_all(data: &[u8], sizes: Vec<usize>) -> Vec<Expect> {
    let mut src = Chunked {
        data,
        sizes,
        next: 0,
    };
    let mut reader = LineReader::new();
    let mut out = Vec::new();
    loop {
        match reader.next_line(&mut src) {
            Line::Complete(l) => out.push(Expect::Complete(l.to_vec())),
            Line::TooLong => out.push(Expect::TooLong),
            Line::CutShort => out.push(Expect::CutShort),
            Line::Eof => return out,
            Line::Io => panic!("no I/O errors here"),
        }
    }
}

#[test]
fn framing_examples() {
    let long = vec![b'a'; 3 * MAX_LINE + 5];
    let mut data = b"STATUS\r\nGEN n=1\n\n".to_vec();
    data.extend_from_slice(&long);
    data.extend_from_slice(b"\nQUIT\nGEN prom");
    assert_eq!(
        read_all(&data, vec![1, 2, 3, 1000]),
        vec![
            Expect::Complete(b"STATUS".to_vec()),
            Expect::Complete(b"GEN n=1".to_vec()),
            Expect::Complete(Vec::new()),
            Expect::TooLong,
            Expect::Complete(b"QUIT".to_vec()),
            Expect::CutShort,
        ]
    );
    // MAX_LINE bytes before the newline (a `\r` included) is a line; one more is too long.
    let fits = vec![b'b'; MAX_LINE];
    let mut data = fits.clone();
    data.extend_from_slice(b"\n");
    data.extend_from_slice(&fits);
    data.extend_from_slice(b"\r\n");
    assert_eq!(
        read_all(&data, vec![]),
        vec![Expect::Complete(fits), Expect::TooLong]
    );
}

#[test]
fn commands() {
    let parse = |s: &[u8]| {
        let mut v = s.to_vec();
        format!("{:?}", protocol::parse_command(&mut v))
    };
    assert_eq!(parse(b"STATUS"), "Ok(Status)");
    assert_eq!(parse(b"QUIT"), "Ok(Quit)");
    assert_eq!(parse(b"  "), "Ok(Blank)");
    assert_eq!(parse(b"status"), "Err(Unknown(\"status\"))");
    assert_eq!(parse(b"STATUS x"), "Err(UnexpectedArgs(\"STATUS\"))");
    assert_eq!(parse(b"GEN \xff"), "Err(NotUtf8)");
    let mut line = b"n=3 seed=9 prompt=a b\\x41\\n\\\\".to_vec();
    let p = request::parse_gen(&mut line).expect("valid");
    assert_eq!((p.tokens, p.seed, p.prompt), (3, 9, Some(&b"a bA\n\\"[..])));
    for bad in [
        &b"n=1025"[..],
        b"n=-1",
        b"top_p=0",
        b"temperature=nan",
        b"x",
        b"levels=2",
        b"prompt=",
        b"prompt=\\",
        b"prompt=\\x4",
        b"prompt=\\xzz",
        b"prompt=\\q",
    ] {
        let mut line = bad.to_vec();
        assert!(
            request::parse_gen(&mut line).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    assert_eq!(request::parse_reset("levels=3", 15), Ok(Some(3)));
    assert_eq!(request::parse_reset("", 15), Ok(None));
    assert!(request::parse_reset("levels=0", 15).is_err());
    assert!(request::parse_reset("levels=16", 15).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any bytes in any chunking: the reader returns the reference lines.
    #[test]
    fn framing_matches_reference(
        data in proptest::collection::vec(
            prop_oneof![Just(b'\n'), Just(b'\r'), any::<u8>(), Just(b'a')], 0..2000),
        sizes in proptest::collection::vec(1usize..700, 0..40),
    ) {
        prop_assert_eq!(read_all(&data, sizes), reference(&data));
    }

    /// Any line parses to a command or an error, and GEN/RESET arguments to parameters or an
    /// error, without panicking.
    #[test]
    fn parsing_never_panics(line in proptest::collection::vec(any::<u8>(), 0..600),
                            prefix in prop_oneof![Just(&b"GEN "[..]), Just(&b"RESET "[..]),
                                                  Just(&b""[..])]) {
        let mut v = prefix.to_vec();
        v.extend_from_slice(&line);
        match protocol::parse_command(&mut v) {
            Ok(Command::Gen(args)) => { let _ = request::parse_gen(args); }
            Ok(Command::Reset(args)) => { let _ = request::parse_reset(args, 15); }
            _ => {}
        }
    }
}
