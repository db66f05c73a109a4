//! Byte-level tokenizer: token id = byte value (the shipped models' vocabulary of 256).
//! Richer vocabularies arrive with the model file.

/// Encodes text as its bytes.
pub fn encode(text: &[u8]) -> impl Iterator<Item = u32> + '_ {
    text.iter().map(|&b| b as u32)
}

/// The byte a token stands for, or `None` if the id is not a byte.
pub fn decode(token: u32) -> Option<u8> {
    u8::try_from(token).ok()
}
