//! The QEMU transport of the serial protocol: semihosting stdin and stdout wrapped in the
//! [`embedded_io`] traits. On a real board a UART driver that implements `embedded_io::Read` and
//! `Write` takes its place; nothing else changes.

use embedded_io::{ErrorKind, ErrorType, Read, Write};
use semihosting::io::{Read as _, Write as _};

/// Semihosting stdin, as an `embedded_io::Read` (end of input: `Ok(0)`).
pub struct SemihostingIn(semihosting::io::Stdin);

/// Semihosting stdout, as an `embedded_io::Write`.
pub struct SemihostingOut(semihosting::io::Stdout);

/// Opens semihosting stdin and stdout.
pub fn open() -> Result<(SemihostingIn, SemihostingOut), ErrorKind> {
    let stdin = semihosting::io::stdin().map_err(|_| ErrorKind::NotFound)?;
    let stdout = semihosting::io::stdout().map_err(|_| ErrorKind::NotFound)?;
    Ok((SemihostingIn(stdin), SemihostingOut(stdout)))
}

impl ErrorType for SemihostingIn {
    type Error = ErrorKind;
}

impl ErrorType for SemihostingOut {
    type Error = ErrorKind;
}

impl Read for SemihostingIn {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, ErrorKind> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.0.read(buf).map_err(|_| ErrorKind::Other)
    }
}

impl Write for SemihostingOut {
    fn write(&mut self, buf: &[u8]) -> Result<usize, ErrorKind> {
        self.0.write(buf).map_err(|_| ErrorKind::Other)
    }

    fn flush(&mut self) -> Result<(), ErrorKind> {
        Ok(())
    }
}
