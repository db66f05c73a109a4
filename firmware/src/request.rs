//! The request line: generation parameters and the prompt, as `key=value` words.
//!
//! ```text
//! n=32 temperature=0.8 top_k=0 top_p=1 seed=0 levels=15 prompt=ROMEO:\n
//! ```
//!
//! Every key is optional (missing ones keep [`Request::default`]); `prompt=` must come last and
//! takes the rest of the line, with the escapes `\n`, `\t` and `\\`. An empty line means all
//! defaults. Unknown keys, bad numbers and an empty prompt are errors, never guesses.

use core::fmt;

/// Default prompt (the host CLI's default, `ROMEO:\n`).
pub const DEFAULT_PROMPT: &[u8] = b"ROMEO:\n";
/// At most this many tokens per request: the firmware keeps their ids to list them at the end.
pub const MAX_TOKENS: usize = 1024;

/// One generation request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Request<'a> {
    /// Tokens to generate.
    pub tokens: usize,
    /// 0 = greedy.
    pub temperature: f32,
    /// 0 = no top-k cut.
    pub top_k: usize,
    /// 1 = no nucleus cut.
    pub top_p: f32,
    /// Sampler seed.
    pub seed: u64,
    /// State levels (`None`: as many as the arena was built for).
    pub levels: Option<usize>,
    /// Prompt bytes (unescaped).
    pub prompt: &'a [u8],
}

impl Default for Request<'_> {
    fn default() -> Self {
        Self {
            tokens: 32,
            temperature: 0.8,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
            levels: None,
            prompt: DEFAULT_PROMPT,
        }
    }
}

/// Why a request line was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestError<'a> {
    /// A word is not `key=value`.
    NotKeyValue,
    /// A key this firmware does not know.
    UnknownKey(&'a str),
    /// A value that does not parse or is out of range, for this key.
    BadValue(&'static str),
    /// The prompt is empty.
    EmptyPrompt,
    /// The line is not UTF-8 before the prompt.
    NotUtf8,
}

impl fmt::Display for RequestError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::NotKeyValue => write!(f, "expected key=value words"),
            RequestError::UnknownKey(k) => write!(f, "unknown key {k}"),
            RequestError::BadValue(k) => write!(f, "bad value for {k}"),
            RequestError::EmptyPrompt => write!(f, "the prompt must not be empty"),
            RequestError::NotUtf8 => write!(f, "the parameters are not UTF-8"),
        }
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for RequestError<'_> {
    fn format(&self, f: defmt::Formatter<'_>) {
        match self {
            RequestError::NotKeyValue => defmt::write!(f, "expected key=value words"),
            RequestError::UnknownKey(k) => defmt::write!(f, "unknown key {}", k),
            RequestError::BadValue(k) => defmt::write!(f, "bad value for {}", k),
            RequestError::EmptyPrompt => defmt::write!(f, "the prompt must not be empty"),
            RequestError::NotUtf8 => defmt::write!(f, "the parameters are not UTF-8"),
        }
    }
}

/// Parses `line` (without its newline). The prompt is unescaped in place, so the result
/// borrows `line`.
pub fn parse(line: &mut [u8]) -> Result<Request<'_>, RequestError<'_>> {
    let mut req = Request::default();
    // Split off `prompt=...` first: it may contain spaces and any bytes.
    let (params, prompt) = match find(line, b"prompt=") {
        Some(i) if i == 0 || line[i - 1] == b' ' => {
            let (p, rest) = line.split_at_mut(i);
            (p, Some(&mut rest[b"prompt=".len()..]))
        }
        _ => (line, None),
    };
    let params = core::str::from_utf8(params).map_err(|_| RequestError::NotUtf8)?;
    for word in params.split_ascii_whitespace() {
        let (k, v) = word.split_once('=').ok_or(RequestError::NotKeyValue)?;
        match k {
            "n" => {
                req.tokens = v
                    .parse()
                    .ok()
                    .filter(|n| *n <= MAX_TOKENS)
                    .ok_or(RequestError::BadValue("n"))?
            }
            "temperature" => {
                req.temperature = v
                    .parse()
                    .ok()
                    .filter(|t: &f32| t.is_finite() && *t >= 0.0)
                    .ok_or(RequestError::BadValue("temperature"))?
            }
            "top_k" => req.top_k = v.parse().map_err(|_| RequestError::BadValue("top_k"))?,
            "top_p" => {
                req.top_p = v
                    .parse()
                    .ok()
                    .filter(|p: &f32| *p > 0.0 && *p <= 1.0)
                    .ok_or(RequestError::BadValue("top_p"))?
            }
            "seed" => req.seed = v.parse().map_err(|_| RequestError::BadValue("seed"))?,
            "levels" => req.levels = Some(v.parse().map_err(|_| RequestError::BadValue("levels"))?),
            _ => return Err(RequestError::UnknownKey(k)),
        }
    }
    if let Some(p) = prompt {
        let n = unescape(p);
        if n == 0 {
            return Err(RequestError::EmptyPrompt);
        }
        req.prompt = &p[..n];
    }
    Ok(req)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Rewrites `\n`, `\t`, `\\` in place; returns the new length. Other backslashes stay.
fn unescape(buf: &mut [u8]) -> usize {
    let (mut r, mut w) = (0, 0);
    while r < buf.len() {
        let b = buf[r];
        let next = buf.get(r + 1).copied();
        let (out, used) = match (b, next) {
            (b'\\', Some(b'n')) => (b'\n', 2),
            (b'\\', Some(b't')) => (b'\t', 2),
            (b'\\', Some(b'\\')) => (b'\\', 2),
            _ => (b, 1),
        };
        buf[w] = out;
        w += 1;
        r += used;
    }
    w
}
