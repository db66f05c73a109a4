//! GPT-2's byte ↔ character mapping (`bytes_to_unicode` in OpenAI's `encoder.py`, `ByteLevel`
//! in Hugging Face `tokenizers`): a byte-level BPE vocabulary spells every byte as one printable
//! character, so that token strings never hold spaces or control characters. The printable
//! bytes `!`..`~`, `¡`..`¬` and `®`..`ÿ` stand for themselves; the other 68 bytes, in increasing
//! order, become U+0100, U+0101, ... (so the space is `Ġ`, U+0120).
//!
//! The tables are built at compile time; no heap, no panics.

/// Whether GPT-2 keeps `b` as its own character.
const fn is_printable(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// The code point of each byte's character (all below U+0144).
// Indexing in a constant is evaluated by the compiler: out of bounds fails the build.
#[allow(clippy::indexing_slicing)]
const BYTE_TO_CODE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut next = 0x100u16;
    let mut b = 0usize;
    while b < 256 {
        if is_printable(b as u8) {
            table[b] = b as u16;
        } else {
            table[b] = next;
            next += 1;
        }
        b += 1;
    }
    table
};

/// The characters' code points end below this.
const CODE_END: usize = 0x144;

/// The byte of each code point below [`CODE_END`], `None` for code points that stand for none.
#[allow(clippy::indexing_slicing)]
const CODE_TO_BYTE: [Option<u8>; CODE_END] = {
    let mut table = [None; CODE_END];
    let mut b = 0usize;
    while b < 256 {
        table[BYTE_TO_CODE[b] as usize] = Some(b as u8);
        b += 1;
    }
    table
};

/// The character that stands for byte `b`.
pub fn byte_to_char(b: u8) -> char {
    let code = BYTE_TO_CODE.get(usize::from(b)).copied().unwrap_or(0);
    char::from_u32(u32::from(code)).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// The byte a character stands for, `None` if it stands for none.
pub fn char_to_byte(c: char) -> Option<u8> {
    let code = usize::try_from(u32::from(c)).ok()?;
    CODE_TO_BYTE.get(code).copied().flatten()
}

/// The UTF-8 bytes of `bytes` spelled with GPT-2's characters, one by one, without a buffer.
pub fn spelled(bytes: &[u8]) -> impl Iterator<Item = u8> + '_ {
    bytes.iter().flat_map(|&b| {
        let mut utf8 = [0u8; 4];
        let len = byte_to_char(b).encode_utf8(&mut utf8).len();
        utf8.into_iter().take(len)
    })
}

/// The bytes a token's text stands for. When every character is one of GPT-2's byte
/// characters, those bytes; otherwise (a special token such as `<|endoftext|>` written plainly)
/// the text's own UTF-8 bytes, as `tokenizers`' `ByteLevel` decoder does.
pub fn token_bytes(text: &str) -> impl Iterator<Item = u8> + '_ {
    let spelled = text.chars().all(|c| char_to_byte(c).is_some());
    // One of the two halves is empty.
    let mapped = text
        .chars()
        .filter_map(char_to_byte)
        .take_while(move |_| spelled);
    let plain = text.bytes().take_while(move |_| !spelled);
    mapped.chain(plain)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn matches_gpt2_bytes_to_unicode() {
        assert_eq!(byte_to_char(b'!'), '!');
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(0), '\u{100}');
        assert_eq!(byte_to_char(0xAD), '\u{143}');
        assert_eq!(byte_to_char(0xFF), 'ÿ');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b));
        }
        let mapped = ('\0'..='\u{200}')
            .filter(|&c| char_to_byte(c).is_some())
            .count();
        assert_eq!(mapped, 256);
        assert_eq!(char_to_byte(' '), None);
        assert_eq!(char_to_byte('日'), None);
    }

    #[test]
    fn token_bytes_undo_the_spelling_or_keep_plain_text() {
        let bytes: std::vec::Vec<u8> = token_bytes("aĠbÿ").collect();
        assert_eq!(bytes, b"a b\xff");
        let bytes: std::vec::Vec<u8> = token_bytes("<|end|> 日").collect();
        assert_eq!(bytes, "<|end|> 日".as_bytes());
    }

    #[test]
    fn spells_bytes_as_utf8() {
        let s: std::vec::Vec<u8> = spelled(b"a b\xff").collect();
        assert_eq!(core::str::from_utf8(&s), Ok("aĠbÿ"));
    }
}
