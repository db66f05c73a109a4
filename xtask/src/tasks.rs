//! What the long-running tasks (`qemu`, `kernel-check`, `count`, `boards`) share: the repository
//! and its target folder, running commands with errors that name them, the host CLI, and the
//! firmware builds with a board's settings.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use loglinear_planner::{Board, BoardProfile};

/// The model every board runs unless its board.toml names another (`model = ...`).
pub const DEFAULT_MODEL: &str = "models/ll-gdn-mcu16k-q8_0.gguf";

/// The repository and the folder cargo builds into.
pub struct Repo {
    /// The repository root (the current folder once [`Repo::enter`] returns).
    pub root: PathBuf,
    /// `$CARGO_TARGET_DIR`, else `<root>/target`.
    pub target_dir: PathBuf,
}

impl Repo {
    /// Finds the repository (this crate's parent folder) and makes it the current folder, so
    /// that relative paths from board.toml (`model = "target/models/..."`) resolve.
    pub fn enter() -> anyhow::Result<Self> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .context("xtask/ has no parent folder")?
            .to_path_buf();
        std::env::set_current_dir(&root)
            .with_context(|| format!("entering the repository {}", root.display()))?;
        let target_dir = match std::env::var_os("CARGO_TARGET_DIR") {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => root.join("target"),
        };
        Ok(Self { root, target_dir })
    }

    /// Builds the `loglinear` CLI (release) and returns its path.
    pub fn host_cli(&self) -> anyhow::Result<PathBuf> {
        run(Command::new("cargo").args([
            "build",
            "--release",
            "-q",
            "-p",
            "loglinear-cli",
            "--bin",
            "loglinear",
        ]))?;
        Ok(self.target_dir.join("release/loglinear"))
    }

    /// Builds a workspace example (release) and returns its path. The build resolves features
    /// as the test build of `cargo xtask ci` does (`--workspace --exclude xtask`, which builds
    /// the examples too), so after that build it compiles nothing; `-p <package>` would resolve
    /// them for that package alone and rebuild the shared dependencies.
    pub fn workspace_example(&self, name: &str) -> anyhow::Result<PathBuf> {
        run(Command::new("cargo").args([
            "build",
            "--release",
            "-q",
            "--workspace",
            "--exclude",
            "xtask",
            "--example",
            name,
        ]))?;
        Ok(self.target_dir.join("release/examples").join(name))
    }

    /// Makes the model files that board profiles name under `target/models/` (derived from the
    /// checkpoints in `models/`, so none of them is committed): the Q4_0 conversion of
    /// `models/ll-gdn-mcu16k` for the boards whose flash cannot hold the Q8_0 file. Converting
    /// takes milliseconds, so it always runs; an unchanged file is left alone, so that its
    /// timestamp does not make cargo rebuild the firmware that embeds it.
    pub fn make_board_models(&self, cli: &Path) -> anyhow::Result<()> {
        let out = Path::new("target/models/ll-gdn-mcu16k-q4_0.gguf");
        let fresh = out.with_extension("gguf.new");
        std::fs::create_dir_all("target/models").context("creating target/models")?;
        run(Command::new(cli)
            .args(["convert", "models/ll-gdn-mcu16k", "-o"])
            .arg(&fresh)
            .args(["--type", "q4_0", "--no-eval"])
            .stdout(Stdio::null()))?;
        let new = std::fs::read(&fresh).with_context(|| format!("reading {}", fresh.display()))?;
        if std::fs::read(out).ok().as_deref() == Some(&new[..]) {
            std::fs::remove_file(&fresh)
                .with_context(|| format!("removing {}", fresh.display()))?;
        } else {
            std::fs::rename(&fresh, out).with_context(|| format!("writing {}", out.display()))?;
            println!(
                "made {} ({} B) from models/ll-gdn-mcu16k",
                out.display(),
                new.len()
            );
        }
        Ok(())
    }
}

/// A task's arguments as `cargo xtask <task>` with no words gives them: the defaults and the
/// environment variables the task reads (`QEMU_TIMEOUT`, `CASES`, ...), so that `cargo xtask
/// ci` runs each task as its own command would.
pub fn default_args<A: clap::Args>() -> anyhow::Result<A> {
    task_args(&[])
}

/// A task's arguments as `cargo xtask <task> <words>` gives them.
pub fn task_args<A: clap::Args>(words: &[&str]) -> anyhow::Result<A> {
    let matches = A::augment_args(clap::Command::new("xtask"))
        .try_get_matches_from(std::iter::once("xtask").chain(words.iter().copied()))
        .with_context(|| format!("the task's arguments {words:?}"))?;
    Ok(A::from_arg_matches(&matches)?)
}

/// Runs a command to completion; an error names it and its exit status.
pub fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("starting {}", describe(cmd)))?;
    if !status.success() {
        bail!("{} failed ({status})", describe(cmd));
    }
    Ok(())
}

/// Runs a command and returns its standard output; an error names it and carries its
/// standard error.
pub fn output(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("starting {}", describe(cmd)))?;
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}",
            describe(cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
    String::from_utf8(out.stdout).with_context(|| format!("{} printed non-UTF-8", describe(cmd)))
}

/// A command line for messages: the program and its arguments.
pub fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(OsStr::to_string_lossy)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The command of a board.toml runner line (`runner`, `uart_runner`: words split at spaces,
/// no quoting) with the image appended.
pub fn runner_command(runner: &str, image: &Path) -> anyhow::Result<Command> {
    let mut words = runner.split_whitespace();
    let program = words.next().context("the runner command line is empty")?;
    let mut cmd = Command::new(program);
    cmd.args(words).arg(image);
    Ok(cmd)
}

/// The QEMU boards (`kind = "qemu"`), by name, sorted.
pub fn qemu_boards() -> anyhow::Result<Vec<BoardProfile>> {
    let mut boards = Vec::new();
    for name in Board::list(Some(Path::new("boards"))) {
        if let Board::Firmware(b) = Board::find(&name)? {
            if b.kind == "qemu" {
                boards.push(*b);
            }
        }
    }
    Ok(boards)
}

/// A firmware board (`kind = "qemu"` or `"hardware"`) by name or folder.
pub fn firmware_board(name: &str) -> anyhow::Result<BoardProfile> {
    match Board::find(name).with_context(|| format!("no board {name}"))? {
        Board::Firmware(b) => Ok(*b),
        Board::Linux(b) => bail!(
            "{name} is a Linux board ({}): it has no firmware image",
            b.path.display()
        ),
    }
}

/// A board named on the command line, which must run under QEMU (`kind = "qemu"`).
pub fn qemu_board(name: &str) -> anyhow::Result<BoardProfile> {
    let board = BoardProfile::find(name).with_context(|| format!("board {name}"))?;
    if board.kind != "qemu" {
        let known: Vec<String> = qemu_boards()?.into_iter().map(|b| b.name).collect();
        bail!(
            "board {name} is kind = \"{}\" ({}), not a QEMU board; the QEMU boards: {}",
            board.kind,
            board.path.display(),
            known.join(", ")
        );
    }
    Ok(board)
}

/// Makes sure the model file of a firmware build exists: the files that board profiles name
/// under `target/models/` are derived from `models/` ([`Repo::make_board_models`]) and made
/// here if missing, so that a task works from a fresh clone.
pub fn ensure_model(repo: &Repo, model: &Path) -> anyhow::Result<()> {
    if !model.is_file() && model.starts_with("target/models") {
        repo.make_board_models(&repo.host_cli()?)?;
    }
    if !model.is_file() {
        bail!("no model file {}", model.display());
    }
    Ok(())
}

/// The firmware's cargo profile for speed, the one the board images use.
pub const RELEASE: &str = "release";
/// The firmware's cargo profile for flash (firmware/Cargo.toml): opt-level "z", the runtime "s".
pub const RELEASE_SMALL: &str = "release-small";

/// A firmware/ build for one board: `cargo build` (or `clippy`) of the firmware package with the
/// board's target, RUSTFLAGS and `LOGLINEAR_*` settings. The fields left `None` take the board's
/// own settings (firmware/build.rs reads its board.toml).
pub struct FirmwareBuild<'a> {
    /// The board (`LOGLINEAR_BOARD`).
    pub board: &'a BoardProfile,
    /// The model file linked into flash (`LOGLINEAR_MODEL`).
    pub model: &'a Path,
    /// `LOGLINEAR_TRANSPORT`: `uart`, `semihosting`, or the board's.
    pub transport: Option<&'a str>,
    /// `LOGLINEAR_ACTIVATIONS`: `f32`, `q8`, or the board's.
    pub activations: Option<&'a str>,
    /// `LOGLINEAR_KERNEL`: a pinned integer kernel path, or the fastest.
    pub kernel: Option<&'a str>,
    /// Cargo features of the firmware package.
    pub features: &'a [&'a str],
    /// The binary to build (`--bin`), or the package's default image.
    pub bin: Option<&'a str>,
    /// The cargo profile: `release` (speed), or `release-small` (flash; firmware/Cargo.toml).
    pub profile: &'a str,
    /// The cargo target folder of this build.
    pub target_dir: &'a Path,
}

impl<'a> FirmwareBuild<'a> {
    /// The build of the firmware package's image for `board` with `model`, in `target_dir`,
    /// with the board's own settings.
    pub fn new(board: &'a BoardProfile, model: &'a Path, target_dir: &'a Path) -> Self {
        Self {
            board,
            model,
            transport: None,
            activations: None,
            kernel: None,
            features: &[],
            bin: None,
            profile: RELEASE,
            target_dir,
        }
    }

    /// The cargo command (`build` or `clippy`) with the board's environment set.
    pub fn command(&self, subcommand: &str) -> Command {
        let mut cmd = Command::new("cargo");
        cmd.args([
            subcommand,
            "--profile",
            self.profile,
            "-q",
            "--manifest-path",
        ])
        .arg("firmware/Cargo.toml")
        .args(["--target", &self.board.target])
        .arg("--target-dir")
        .arg(self.target_dir)
        .env("LOGLINEAR_BOARD", &self.board.name)
        .env("LOGLINEAR_MODEL", self.model)
        .env("LOGLINEAR_LEVELS", "")
        .env("LOGLINEAR_STATE", "")
        .env("LOGLINEAR_TRANSPORT", self.transport.unwrap_or(""))
        .env("LOGLINEAR_ACTIVATIONS", self.activations.unwrap_or(""))
        .env("LOGLINEAR_KERNEL", self.kernel.unwrap_or(""))
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            firmware_rustflags(&self.board.rustflags),
        );
        if !self.features.is_empty() {
            cmd.arg("--features").arg(self.features.join(","));
        }
        if let Some(bin) = self.bin {
            cmd.args(["--bin", bin]);
        }
        cmd
    }

    /// Builds the image and copies it to `copy_to`, which it returns.
    pub fn build(&self, copy_to: &Path) -> anyhow::Result<PathBuf> {
        run(&mut self.command("build"))
            .with_context(|| format!("building the firmware for {}", self.board.name))?;
        let built = self.elf();
        if let Some(dir) = copy_to.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::copy(&built, copy_to)
            .with_context(|| format!("copying {} to {}", built.display(), copy_to.display()))?;
        Ok(copy_to.to_path_buf())
    }

    /// Where cargo writes the image of this build.
    pub fn elf(&self) -> PathBuf {
        self.target_dir
            .join(&self.board.target)
            .join(self.profile)
            .join(self.bin.unwrap_or("loglinear-firmware"))
    }

    /// `cargo clippy -- -D warnings` of the same configuration.
    pub fn clippy(&self) -> anyhow::Result<()> {
        run(self.command("clippy").args(["--", "-D", "warnings"]))
            .with_context(|| format!("clippy of the firmware for {}", self.board.name))
    }
}

/// Whether `board` is built from its own crate, `boards/<board>/Cargo.toml` (a HAL board crate),
/// rather than from firmware/.
pub fn has_own_crate(board: &BoardProfile) -> bool {
    Path::new("boards")
        .join(&board.name)
        .join("Cargo.toml")
        .is_file()
}

/// The defmt transport of a HAL board crate's image.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Defmt {
    /// The crate's default features: RTT, the image a user flashes.
    Default,
    /// `--no-default-features --features defmt-semihosting`: the image QEMU runs (logs on
    /// semihosting stderr, the exit status through semihosting).
    Semihosting,
}

/// A build of a HAL board crate (`boards/<board>/Cargo.toml`) from its folder, whose
/// .cargo/config.toml names the target and the board; the `LOGLINEAR_*` settings other than the
/// model are the board.toml's.
pub struct BoardCrateBuild<'a> {
    /// The board.
    pub board: &'a BoardProfile,
    /// `LOGLINEAR_MODEL`: another model than the board's.
    pub model: Option<&'a Path>,
    /// The defmt transport.
    pub defmt: Defmt,
    /// The cargo profile.
    pub profile: &'a str,
    /// The cargo target folder of this build.
    pub target_dir: &'a Path,
}

impl<'a> BoardCrateBuild<'a> {
    /// The build of `board`'s crate with its own settings and the crate's default features.
    pub fn new(board: &'a BoardProfile, target_dir: &'a Path) -> Self {
        Self {
            board,
            model: None,
            defmt: Defmt::Default,
            profile: RELEASE,
            target_dir,
        }
    }

    /// The cargo command (`build` or `clippy`), run in the crate's folder.
    pub fn command(&self, subcommand: &str) -> Command {
        let mut cmd = Command::new("cargo");
        cmd.args([subcommand, "--profile", self.profile, "-q", "--target-dir"])
            .arg(std::path::absolute(self.target_dir).unwrap_or(self.target_dir.to_path_buf()))
            .current_dir(Path::new("boards").join(&self.board.name))
            .env(
                "LOGLINEAR_MODEL",
                self.model
                    .map(|m| std::path::absolute(m).unwrap_or(m.to_path_buf()))
                    .unwrap_or_default(),
            )
            .env("LOGLINEAR_LEVELS", "")
            .env("LOGLINEAR_STATE", "")
            .env("LOGLINEAR_TRANSPORT", "")
            .env("LOGLINEAR_ACTIVATIONS", "")
            .env("LOGLINEAR_KERNEL", "")
            .env(
                "CARGO_ENCODED_RUSTFLAGS",
                firmware_rustflags(&self.board.rustflags),
            );
        if self.defmt == Defmt::Semihosting {
            cmd.args(["--no-default-features", "--features", "defmt-semihosting"]);
        }
        cmd
    }

    /// Builds the image and copies it to `copy_to`, which it returns.
    pub fn build(&self, copy_to: &Path) -> anyhow::Result<PathBuf> {
        let name = &self.board.name;
        run(&mut self.command("build"))
            .with_context(|| format!("{name}: building boards/{name}"))?;
        let built = self
            .target_dir
            .join(&self.board.target)
            .join(self.profile)
            .join(format!("loglinear-{name}"));
        if let Some(dir) = copy_to.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::copy(&built, copy_to)
            .with_context(|| format!("copying {} to {}", built.display(), copy_to.display()))?;
        Ok(copy_to.to_path_buf())
    }
}

/// The rustflags of a firmware build, as `CARGO_ENCODED_RUSTFLAGS`: the board's own, then a
/// remap of the repository's and cargo home's paths. Panic locations embed those paths in flash,
/// so without the remap an image's size depends on where the checkout lies: the footprint goals
/// and the size snapshots must hold in every checkout, CI's included.
pub fn firmware_rustflags(board_flags: &str) -> OsString {
    let mut flags: Vec<OsString> = board_flags.split_whitespace().map(OsString::from).collect();
    let root = std::env::current_dir().ok();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")));
    // The last matching remap wins, so cargo home goes last in case it lies inside the checkout.
    let remaps = [
        root.map(|root| (root, ".")),
        cargo_home.map(|home| (home, "/cargo")),
    ];
    for (from, to) in remaps.into_iter().flatten() {
        let mut flag = OsString::from("--remap-path-prefix=");
        flag.push(from.as_os_str());
        flag.push("=");
        flag.push(to);
        flags.push(flag);
    }
    let mut encoded = OsString::new();
    for (i, flag) in flags.iter().enumerate() {
        if i > 0 {
            encoded.push("\x1f");
        }
        encoded.push(flag);
    }
    encoded
}

/// The board's model file: its own (`model = ...`) or [`DEFAULT_MODEL`].
pub fn board_model(board: &BoardProfile) -> PathBuf {
    board
        .model
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_MODEL))
}

/// Runs the bash bootstrap that installs QEMU and the firmware targets (system packages stay in
/// bash: `scripts/qemu-setup.sh`).
pub fn qemu_setup(quiet: bool) -> anyhow::Result<()> {
    let mut cmd = Command::new("bash");
    cmd.arg("scripts/qemu-setup.sh");
    if quiet {
        cmd.stdout(Stdio::null());
    }
    run(&mut cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runner_lines_split_into_program_and_arguments() {
        let cmd = runner_command(
            "qemu-system-arm -machine mps2-an386 -kernel",
            Path::new("fw.elf"),
        )
        .unwrap();
        assert_eq!(
            describe(&cmd),
            "qemu-system-arm -machine mps2-an386 -kernel fw.elf"
        );
        assert!(runner_command("  ", Path::new("x")).is_err());
    }

    #[test]
    fn a_failing_command_is_named_in_the_error() {
        let e = run(Command::new("false").arg("--flag")).unwrap_err();
        assert!(e.to_string().contains("false --flag failed"), "{e}");
        let e = output(Command::new("sh").args(["-c", "echo oops >&2; exit 3"])).unwrap_err();
        assert!(e.to_string().contains("oops"), "{e}");
    }

    #[test]
    fn firmware_rustflags_keep_the_boards_and_remap_the_checkout() {
        let encoded = firmware_rustflags("-C target-cpu=cortex-m4  -C opt-level=s");
        let encoded = encoded.to_str().unwrap();
        let flags: Vec<&str> = encoded.split('\x1f').collect();
        assert_eq!(
            flags[..4],
            ["-C", "target-cpu=cortex-m4", "-C", "opt-level=s"]
        );
        let here = std::env::current_dir().unwrap();
        let remap = format!("--remap-path-prefix={}=.", here.display());
        assert_eq!(flags.get(4), Some(&remap.as_str()), "{flags:?}");
        assert!(flags[4..]
            .iter()
            .all(|f| f.starts_with("--remap-path-prefix=")));
    }
}
