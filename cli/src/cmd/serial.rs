//! `loglinear serial`: the host side of the firmware's serial protocol
//! (`docs/serial-protocol.md`). Talks to a serial port through the `serialport` crate (a board's
//! USB CDC-ACM or UART port, or the pty of a QEMU UART chardev), or to a QEMU process running a
//! board's firmware with semihosting stdin/stdout piped.

use loglinear_converter::command_paths::{CommandPaths, Reads, Writes};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Arguments of `loglinear serial`.
#[derive(clap::Args)]
pub struct SerialArgs {
    /// Serial port of the board: /dev/ttyACM0 (USB CDC-ACM), /dev/ttyUSB0 (a USB-UART
    /// adapter), a pty; set to raw 8N1 at --baud. `--list-ports` shows the ports found.
    #[arg(
        long,
        required_unless_present_any = ["qemu_board", "list_ports"],
        conflicts_with = "qemu_board"
    )]
    port: Option<PathBuf>,
    /// Baud rate of --port (USB CDC-ACM ignores it; a UART must match the board's).
    #[arg(long, default_value_t = 115_200)]
    baud: u32,
    /// Seconds to wait for each reply line from the board before giving up.
    #[arg(long, value_name = "SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    timeout: u64,
    /// List the serial ports of this machine and exit.
    #[arg(long)]
    list_ports: bool,
    /// Run the firmware of this QEMU board (`boards/<BOARD>/board.toml`'s runner) as a child.
    #[arg(long)]
    qemu_board: Option<String>,
    /// Firmware ELF for --qemu-board
    /// (default: `target/firmware/<target>/release/loglinear-firmware`).
    #[arg(long, requires = "qemu_board")]
    elf: Option<PathBuf>,
    /// Prompt text, with C-style escapes: \n \t \r \0 \\ \xHH (any byte) \u{H…}
    /// (default `ROMEO:\n`; none with --restore, which
    /// continues the uploaded snapshot).
    #[arg(long, value_parser = clap::builder::OsStringValueParser::new())]
    prompt: Option<std::ffi::OsString>,
    /// Tokens to generate.
    #[arg(short = 'n', long, default_value_t = 32)]
    tokens: usize,
    #[command(flatten)]
    sampling: crate::SamplingArgs,
    /// Send `RESET` first (a fresh session instead of continuing the board's context).
    #[arg(long)]
    reset: bool,
    /// Print the board's `STATUS` line on stderr afterwards.
    #[arg(long)]
    status: bool,
    /// Upload this snapshot (`loglinear generate --save-snapshot`) to the board before the
    /// `GEN`: `RESTORE` into its A/B snapshot store, then loaded (docs/serial-protocol.md).
    #[arg(long, value_name = "FILE")]
    restore: Option<PathBuf>,
    /// After the `GEN`, fetch the board's session with `SNAP` into this file (for
    /// `loglinear generate --resume`).
    #[arg(long, value_name = "FILE")]
    snap: Option<PathBuf>,
}

/// The `GEN` parameters of `args` as the board reads them, refused here with the board's own
/// parser (a value it would not take, such as a temperature with more than 9 digits) before
/// any port is opened.
fn gen_params(args: &SerialArgs) -> Res<String> {
    let line = format!(
        "n={} temperature={} top_k={} top_p={} seed={}",
        args.tokens,
        args.sampling.temperature,
        args.sampling.config().top_k,
        args.sampling.top_p,
        args.sampling.seed,
    );
    let mut bytes = line.clone().into_bytes();
    if let Err(e) = loglinear_protocol::request::parse_gen(&mut bytes) {
        return Err(format!(
            "the board would refuse `GEN {line}`: {e} (-n at most {}; --temperature and \
             --top-p plain decimals of at most {} digits, with --top-p in (0, 1])",
            loglinear_protocol::request::MAX_TOKENS,
            loglinear_protocol::decimal::MAX_DIGITS,
        )
        .into());
    }
    Ok(line)
}

/// Opens `port` as a serial port: raw 8N1 at `baud`, reads that give up after `timeout`
/// seconds without a byte. A path that is not a serial port (a regular file, a folder) is
/// refused before anything is written to it.
fn open_port(port: &Path, baud: u32, timeout: u64) -> Res<(Box<dyn Write>, Box<dyn Read>)> {
    let name = port.to_string_lossy();
    let meta = std::fs::metadata(port)
        .map_err(|e| format!("serial port {name}: {e} (`loglinear serial --list-ports`)"))?;
    if meta.is_file() || meta.is_dir() {
        return Err(format!(
            "{name} is not a serial port but a {}",
            if meta.is_dir() {
                "folder"
            } else {
                "regular file"
            }
        )
        .into());
    }
    let open = serialport::new(name.as_ref(), baud)
        .timeout(std::time::Duration::from_secs(timeout))
        .open()
        .map_err(|e| format!("serial port {name}: {e}"))?;
    let rx = open
        .try_clone()
        .map_err(|e| format!("serial port {name}: {e}"))?;
    let label = name.into_owned();
    Ok((
        Box::new(NamedPort {
            port: open,
            name: label.clone(),
            timeout,
        }),
        Box::new(NamedPort {
            port: rx,
            name: label,
            timeout,
        }),
    ))
}

/// A serial port whose errors name it, and whose read timeout says what timed out.
struct NamedPort {
    port: Box<dyn serialport::SerialPort>,
    name: String,
    timeout: u64,
}

impl NamedPort {
    fn error(&self, e: std::io::Error) -> std::io::Error {
        let what = if e.kind() == std::io::ErrorKind::TimedOut {
            format!(
                "no reply from the board within {} s (--timeout)",
                self.timeout
            )
        } else {
            e.to_string()
        };
        std::io::Error::new(e.kind(), format!("serial port {}: {what}", self.name))
    }
}

impl Read for NamedPort {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.port.read(buf).map_err(|e| self.error(e))
    }
}

impl Write for NamedPort {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.port.write(buf).map_err(|e| self.error(e))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.port.flush().map_err(|e| self.error(e))
    }
}

/// Prints the serial ports found on this machine.
fn list_ports() -> Res {
    let ports = serialport::available_ports().map_err(|e| format!("listing serial ports: {e}"))?;
    if ports.is_empty() {
        println!("no serial ports found");
    }
    for p in ports {
        let kind = match p.port_type {
            serialport::SerialPortType::UsbPort(u) => format!(
                "USB {:04x}:{:04x}{}",
                u.vid,
                u.pid,
                u.product.map(|p| format!(" {p}")).unwrap_or_default()
            ),
            serialport::SerialPortType::PciPort => "PCI".into(),
            serialport::SerialPortType::BluetoothPort => "Bluetooth".into(),
            serialport::SerialPortType::Unknown => "unknown".into(),
        };
        println!("{}	{kind}", p.port_name);
    }
    Ok(())
}

impl SerialArgs {
    /// What `serial` reads and writes: the port is opened both ways, and declared as an input
    /// so that no output is written over it.
    pub(crate) fn paths(&self) -> CommandPaths {
        if self.list_ports {
            return CommandPaths::new();
        }
        CommandPaths::new()
            .reads("--port", self.port.as_deref(), Reads::Device)
            .reads("--elf", self.elf.as_deref(), Reads::File)
            .reads("--restore", self.restore.as_deref(), Reads::File)
            .writes("--snap", self.snap.as_deref(), Writes::File)
    }
}

/// Runs `loglinear serial`.
pub fn run(args: &SerialArgs) -> Res {
    if args.list_ports {
        return list_ports();
    }
    let gen = gen_params(args)?;
    let mut wait_ready = false;
    let (mut tx, rx, child): (Box<dyn Write>, Box<dyn Read>, Option<Child>) =
        match (&args.port, &args.qemu_board) {
            (Some(port), _) => {
                let (tx, rx) = open_port(port, args.baud, args.timeout)?;
                (tx, rx, None)
            }
            (None, Some(board)) => {
                let (mut child, uart) = spawn_qemu(board, args.elf.as_deref())?;
                let stdin = child.stdin.take().ok_or("no stdin pipe")?;
                let stdout = child.stdout.take().ok_or("no stdout pipe")?;
                wait_ready = uart;
                (Box::new(stdin), Box::new(stdout), Some(child))
            }
            (None, None) => return Err("give --port or --qemu-board".into()),
        };
    let mut rx = BufReader::new(rx);
    // An emulated UART drops what comes before the firmware has switched its receiver on, which
    // READY says it has.
    if wait_ready {
        loop {
            let line = read_reply(&mut rx)?;
            eprintln!("[{line}]");
            if line.starts_with("READY ") {
                break;
            }
        }
    }
    let prompt = match (&args.prompt, &args.restore) {
        (Some(p), _) => crate::prompt::unescape_arg(p)?,
        (None, Some(_)) => Vec::new(),
        (None, None) => b"ROMEO:\n".to_vec(),
    };
    // Sync first. A blank line ends any partial line a previous host left in the board's line
    // buffer (a UART, unlike a pipe, never cuts it off by end of input); the reply to STATUS then
    // marks where this request's replies begin: what comes before it (READY, an ERR for such a
    // cut line) is shown, not taken for ours.
    writeln!(tx)?;
    writeln!(tx, "STATUS")?;
    tx.flush()?;
    loop {
        let line = read_reply(&mut rx)?;
        if line.starts_with("STATUS ") {
            break;
        }
        eprintln!("[{line}]");
    }
    if args.reset {
        writeln!(tx, "RESET")?;
    }
    if let Some(path) = &args.restore {
        upload(&mut tx, &mut rx, path)?;
    }
    write!(tx, "GEN {gen}")?;
    if !prompt.is_empty() {
        write!(tx, " prompt={}", escape(&prompt))?;
    }
    writeln!(tx)?;
    tx.flush()?;
    let out = std::io::stdout();
    let mut out = out.lock();
    out.write_all(&prompt)?;
    out.flush()?;
    loop {
        let line = read_reply(&mut rx)?;
        let (word, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        match word {
            "TOK" => {
                let esc = rest.split_once(' ').map_or("", |(_, e)| e);
                out.write_all(&unescape(esc))?;
                out.flush()?;
            }
            "DONE" => break,
            "ERR" => return Err(format!("the board refused the request: {line}").into()),
            // READY (start of a QEMU run), OK RESET: shown, not needed.
            _ => eprintln!("[{line}]"),
        }
    }
    writeln!(out)?;
    if let Some(path) = &args.snap {
        fetch_snapshot(&mut tx, &mut rx, path)?;
    }
    if args.status {
        writeln!(tx, "STATUS")?;
        tx.flush()?;
        loop {
            let line = read_reply(&mut rx)?;
            if line.starts_with("STATUS ") {
                eprintln!("[{line}]");
                break;
            }
        }
    }
    if let Some(mut child) = child {
        writeln!(tx, "QUIT")?;
        tx.flush()?;
        drop(tx);
        let status = child.wait()?;
        if !status.success() {
            return Err(format!("QEMU exited with {status}").into());
        }
    }
    Ok(())
}

/// `RESTORE`: uploads the snapshot file in `HEX` lines of 64 bytes, then waits for `RESTORED`.
fn upload(tx: &mut impl Write, rx: &mut impl BufRead, path: &Path) -> Res {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    writeln!(tx, "RESTORE bytes={}", bytes.len())?;
    for chunk in bytes.chunks(64) {
        let digits: String = chunk.iter().map(|b| format!("{b:02x}")).collect();
        writeln!(tx, "HEX {digits}")?;
    }
    writeln!(tx, "END")?;
    tx.flush()?;
    loop {
        let line = read_reply(rx)?;
        if line.starts_with("RESTORED ") {
            eprintln!("[{line}]");
            return Ok(());
        }
        if line.starts_with("ERR ") {
            return Err(format!("the board refused the snapshot: {line}").into());
        }
        eprintln!("[{line}]");
    }
}

/// `SNAP`: writes the board's session snapshot (its `HEX` lines, decoded) to `path`.
fn fetch_snapshot(tx: &mut impl Write, rx: &mut impl BufRead, path: &Path) -> Res {
    writeln!(tx, "SNAP")?;
    tx.flush()?;
    let mut bytes = Vec::new();
    let mut want = None;
    loop {
        let line = read_reply(rx)?;
        if let Some(rest) = line.strip_prefix("SNAP ") {
            want = rest
                .split_whitespace()
                .find_map(|w| w.strip_prefix("bytes="))
                .and_then(|n| n.parse::<usize>().ok());
        } else if let Some(digits) = line.strip_prefix("HEX ") {
            let d = digits.as_bytes();
            if d.len() % 2 != 0 {
                return Err(format!("bad HEX line from the board: {line}").into());
            }
            for pair in d.chunks(2) {
                let pair = std::str::from_utf8(pair)?;
                bytes.push(
                    u8::from_str_radix(pair, 16).map_err(|_| format!("bad HEX line: {line}"))?,
                );
            }
        } else if line == "OK SNAP" {
            break;
        } else if line.starts_with("ERR ") {
            return Err(format!("SNAP failed: {line}").into());
        } else {
            eprintln!("[{line}]");
        }
    }
    match want {
        Some(n) if n == bytes.len() => {}
        Some(n) => return Err(format!("SNAP announced {n} bytes, {} arrived", bytes.len()).into()),
        None => {
            return Err(format!(
                "SNAP did not announce its size (no bytes= field), {} bytes arrived",
                bytes.len()
            )
            .into())
        }
    }
    loglinear_converter::output_file::write_atomic(path, &bytes)?;
    eprintln!("[snapshot: {} bytes to {}]", bytes.len(), path.display());
    Ok(())
}

/// One reply line, without its newline; end of input is an error.
fn read_reply(rx: &mut impl BufRead) -> Res<String> {
    let mut buf = Vec::new();
    if rx.read_until(b'\n', &mut buf)? == 0 {
        return Err("the board closed the connection".into());
    }
    while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        buf.pop();
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Starts the board's QEMU runner with the ELF, stdin and stdout piped; stderr (the firmware's
/// log) goes to ours. The runner is board.toml's `runner` (semihosting stdin/stdout), or for a
/// board whose `transport` is `uart` its `uart_runner` (the UART on QEMU's stdio); the second
/// value says which.
fn spawn_qemu(board: &str, elf: Option<&Path>) -> Res<(Child, bool)> {
    let profile = loglinear_planner::BoardProfile::find(board)?;
    let uart = profile.transport == loglinear_planner::Transport::Uart;
    let (runner, key) = match (&profile.uart_runner, uart) {
        (Some(runner), true) => (runner, "uart_runner"),
        _ => (&profile.runner, "runner"),
    };
    if runner.is_empty() {
        return Err(format!("{}: no {key}", profile.path.display()).into());
    }
    let target = &profile.target;
    // A board with a crate of its own (boards/<board>/Cargo.toml) builds its image there.
    let own_crate = profile.path.with_file_name("Cargo.toml").is_file();
    let default_elf = if own_crate {
        profile
            .path
            .with_file_name("target")
            .join(target)
            .join("release")
            .join(format!("loglinear-{board}"))
    } else {
        Path::new("target/firmware")
            .join(target)
            .join("release/loglinear-firmware")
    };
    let elf = elf.map(Path::to_path_buf).unwrap_or(default_elf);
    if !elf.is_file() {
        let build = if own_crate {
            format!(
                "cd {} && cargo build --release --no-default-features --features \
                 defmt-semihosting",
                profile.path.with_file_name("").display()
            )
        } else {
            format!(
                "LOGLINEAR_BOARD={board} cargo build --release --manifest-path \
                 firmware/Cargo.toml --target {target} --target-dir target/firmware"
            )
        };
        return Err(format!("no firmware at {} (build it: {build})", elf.display()).into());
    }
    let mut words = runner.split_whitespace();
    let program = words.next().ok_or("empty runner")?;
    let child = Command::new(program)
        .args(words)
        .arg(&elf)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    Ok((child, uart))
}

/// Escapes bytes for a `prompt=` field as the protocol crate does (`loglinear_protocol::escaped`),
/// but with spaces kept: a prompt takes the rest of its line.
fn escape(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b' ' => s.push(' '),
            b => s.extend(
                loglinear_protocol::escaped(b)
                    .as_bytes()
                    .iter()
                    .map(|&c| c as char),
            ),
        }
    }
    s
}

/// Decodes the byte field of a `TOK` line (empty: the token is not a byte); a field that is not
/// a valid escape is taken as it is.
fn unescape(field: &str) -> Vec<u8> {
    let mut bytes = field.as_bytes().to_vec();
    match loglinear_protocol::request::unescape(&mut bytes) {
        Ok(n) => bytes.truncate(n),
        Err(_) => bytes = field.as_bytes().to_vec(),
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_round_trip() {
        assert_eq!(escape(b"A b\n\\\x01\xff"), "A b\\n\\\\\\x01\\xff");
        for b in 0..=255u8 {
            let field = match b {
                b'\n' => "\\n".to_string(),
                b'\t' => "\\t".to_string(),
                b'\r' => "\\r".to_string(),
                b'\\' => "\\\\".to_string(),
                b'!'..=b'~' => (b as char).to_string(),
                _ => format!("\\x{b:02x}"),
            };
            assert_eq!(unescape(&field), vec![b]);
        }
        assert_eq!(unescape(""), Vec::<u8>::new());
    }
}
