//! Board profiles: the parts of `boards/<name>/board.toml` that the planner reads.

use crate::{PlanError, StateType};
use loglinear_runtime::quant::Activations;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A memory region of the board.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// Start address.
    pub origin: u64,
    /// Bytes.
    pub length: u64,
}

/// How the firmware talks to its host (`transport` in board.toml; `semihosting` without it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Semihosting stdin/stdout: under QEMU, or through a debug probe.
    Semihosting,
    /// The board's UART: a polled driver (`uart`) on the QEMU machines, the HAL's
    /// interrupt-driven one on a HAL board crate.
    Uart,
    /// USB CDC-ACM, through the HAL's USB device driver (a HAL board crate, `boards/<chip>/`).
    Usb,
}

impl Transport {
    /// The name board.toml uses.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Semihosting => "semihosting",
            Transport::Uart => "uart",
            Transport::Usb => "usb",
        }
    }
}

/// The A/B snapshot store of a board (`[snapshot]`): two slots of `slot_bytes` from `origin`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotRegion {
    /// Start address, a multiple of 4096.
    pub origin: u64,
    /// Bytes of one of the two slots, a non-zero multiple of 4096.
    pub slot_bytes: u64,
}

/// The sustained-input test of a UART board (`uart_sustained_bytes`, `uart_sustained_model`):
/// a prompt of `bytes` sent at full speed over the UART.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SustainedInput {
    /// Prompt bytes.
    pub bytes: u64,
    /// The model file of that test (a path from the repository root), if not the board's.
    pub model: Option<PathBuf>,
}

/// A board profile, `boards/<name>/board.toml`: the one reader of that file, for the planner,
/// the firmware's build script, the host client and the xtask tasks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoardProfile {
    /// `name`.
    pub name: String,
    /// `kind`: `qemu` or `hardware` (a `linux` board is a [`LinuxBoard`]).
    pub kind: String,
    /// `core`: the CPU core (`cortex-m4f`, `rv32imac`, ...).
    pub core: String,
    /// `probe_rs_chip`: the chip as probe-rs names it; empty if probe-rs has no such target.
    pub probe_rs_chip: String,
    /// `rustflags`: the RUSTFLAGS of the board's firmware builds (a `target-cpu`); empty if none.
    pub rustflags: String,
    /// `uart_runner`: the command line that runs a UART image with the UART on QEMU's stdio
    /// (the ELF path is appended), if the board has one.
    pub uart_runner: Option<String>,
    /// The sustained-input test over the UART, if the board runs it.
    pub sustained_input: Option<SustainedInput>,
    /// `clock_hz`: the core clock the firmware runs at, which a HAL board checks against what its
    /// HAL reports at boot.
    pub clock_hz: u64,
    /// `pll_source`: the oscillator that a HAL board crate's build derives its PLL from, to make
    /// `clock_hz` ([`crate::stm32l4_pll`]); `None` where the board crate sets its clocks itself.
    pub pll_source: Option<String>,
    /// `clocks`: how that clock is made (oscillator, PLL, voltage scale, flash wait states,
    /// caches), printed at boot; empty if the profile does not say.
    pub clocks: String,
    /// `runner`: the command line that runs an image (the ELF path is appended); empty if none.
    pub runner: String,
    /// `transport`.
    pub transport: Transport,
    /// `uart`: the board's UART driver in `firmware/src/uart.rs`, if it has one.
    pub uart: Option<String>,
    /// `model`: a board-specific model file (a path from the repository root), if any.
    pub model: Option<PathBuf>,
    /// `[snapshot]`, checked: outside every `[memory.*]` region and the 32-bit address space.
    pub snapshot: Option<SnapshotRegion>,
    /// The `board.toml` read.
    pub path: PathBuf,
    /// `target` (Rust target triple).
    pub target: String,
    /// `[memory.flash]`.
    pub flash: Region,
    /// `[memory.ram]`.
    pub ram: Region,
    /// `[memory.model]`, optional: a flash region apart from the code memory that holds the
    /// model alone (external QSPI flash, say). Without it the model shares `flash` with the code.
    pub model_region: Option<Region>,
    /// The other `[memory.<name>]` tables by name: regions outside the linker's, such as
    /// `psram` or the RP2040's `boot2`. [`BoardProfile::regions`] lists them all.
    pub other_regions: BTreeMap<String, Region>,
    /// `firmware.stack_reserve`: RAM kept free for the stack besides the sampler scratch (which
    /// the planner adds, 4 B per vocabulary entry).
    pub stack_reserve: u64,
    /// `firmware.code_reserve`: flash kept for code next to the model (the code estimate).
    pub code_reserve: u64,
    /// `firmware.levels`: the image's default level count.
    pub levels: usize,
    /// `firmware.state`: the image's default state type.
    pub state: StateType,
    /// `firmware.activations` (`"f32"`, the default, or `"q8"`): how the image's quantized
    /// matvecs treat their input. Q8 adds the activation blocks to the session arena.
    pub activations: Activations,
}

/// `boards/` of the current folder if there is one, else the repository's (next to this crate).
fn default_boards_dir() -> PathBuf {
    let cwd = PathBuf::from("boards");
    if cwd.is_dir() {
        cwd
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../boards")
    }
}

/// A Linux board (`kind = "linux"`): a std build of the runtime and the CLI, no firmware, so no
/// memory map or `[firmware]` settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinuxBoard {
    /// `name`.
    pub name: String,
    /// `core`.
    pub core: String,
    /// `target` (Rust target triple).
    pub target: String,
    /// `linker`: the C linker for `target`.
    pub linker: String,
    /// The `board.toml` read.
    pub path: PathBuf,
}

/// Any board of `boards/`: a firmware board or a Linux board.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Board {
    /// `kind = "qemu"` or `"hardware"`: firmware with a memory map.
    Firmware(Box<BoardProfile>),
    /// `kind = "linux"`.
    Linux(LinuxBoard),
}

impl Board {
    /// Finds a board as [`BoardProfile::find`] does, of any kind.
    pub fn find(board: &str) -> Result<Self, PlanError> {
        let toml = board_toml(board)?;
        let text = crate::read_text(&toml)?;
        let bad = |reason: String| PlanError::MalformedProfile {
            path: toml.clone(),
            reason,
        };
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| bad(e.to_string().trim_end().replace('\n', " ")))?;
        if table.get("kind").and_then(|k| k.as_str()) != Some("linux") {
            return BoardProfile::parse(&text, &toml).map(|b| Board::Firmware(Box::new(b)));
        }
        let string = |key: &str| -> Result<String, PlanError> {
            table
                .get(key)
                .and_then(|v| v.as_str())
                .map(str::to_string)
                .ok_or_else(|| bad(format!("key {key} is missing or not a string")))
        };
        Ok(Board::Linux(LinuxBoard {
            name: string("name")?,
            core: string("core")?,
            target: string("target")?,
            linker: string("linker")?,
            path: toml.clone(),
        }))
    }

    /// The board's name.
    pub fn name(&self) -> &str {
        match self {
            Board::Firmware(b) => &b.name,
            Board::Linux(b) => &b.name,
        }
    }

    /// The board's Rust target triple.
    pub fn target(&self) -> &str {
        match self {
            Board::Firmware(b) => &b.target,
            Board::Linux(b) => &b.target,
        }
    }

    /// The names of the boards under `dir` (folders holding a `board.toml`), sorted; `None`
    /// lists the default `boards/`.
    pub fn list(dir: Option<&Path>) -> Vec<String> {
        let dir = dir.map_or_else(default_boards_dir, Path::to_path_buf);
        let mut known: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().join("board.toml").is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        known.sort();
        known
    }
}

/// The `board.toml` of a board given by folder or by name (see [`BoardProfile::find`]).
fn board_toml(board: &str) -> Result<PathBuf, PlanError> {
    let as_path = Path::new(board);
    let dir = if as_path.join("board.toml").is_file() {
        as_path.to_path_buf()
    } else {
        default_boards_dir().join(board)
    };
    let toml = dir.join("board.toml");
    if !toml.is_file() {
        return Err(PlanError::UnknownBoard {
            name: board.to_string(),
            looked_at: toml,
            known: Board::list(dir.parent()),
        });
    }
    Ok(toml)
}

impl BoardProfile {
    /// Finds a board by folder (`boards/mps2-an386`, any folder holding a `board.toml`) or by
    /// name (a folder under `boards/` of the current folder or of this repository).
    pub fn find(board: &str) -> Result<Self, PlanError> {
        Self::read(&board_toml(board)?)
    }

    /// Reads and parses the `board.toml` at `path`.
    pub fn read(path: &Path) -> Result<Self, PlanError> {
        Self::parse(&crate::read_text(path)?, path)
    }

    /// Parses the text of a `board.toml` (`path` is for messages).
    pub fn parse(text: &str, path: &Path) -> Result<Self, PlanError> {
        let bad = |reason: String| PlanError::MalformedProfile {
            path: path.to_path_buf(),
            reason,
        };
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| bad(e.to_string().trim_end().replace('\n', " ")))?;
        if table.get("kind").and_then(|k| k.as_str()) == Some("linux") {
            return Err(PlanError::LinuxBoard {
                path: path.to_path_buf(),
            });
        }
        let get = |key: &str| -> Result<&toml::Value, PlanError> {
            let mut v: Option<&toml::Value> = None;
            for (i, part) in key.split('.').enumerate() {
                v = if i == 0 {
                    table.get(part)
                } else {
                    v.and_then(|t| t.get(part))
                };
            }
            v.ok_or_else(|| bad(format!("key {key} is missing")))
        };
        let int = |key: &str| -> Result<u64, PlanError> {
            get(key)?
                .as_integer()
                .and_then(|i| u64::try_from(i).ok())
                .ok_or_else(|| bad(format!("{key} must be a non-negative integer")))
        };
        let string = |key: &str| -> Result<String, PlanError> {
            get(key)?
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| bad(format!("{key} must be a string")))
        };
        let state = string("firmware.state")?;
        let activations = match get("firmware.activations") {
            Err(_) => Activations::F32,
            Ok(v) => match v.as_str() {
                Some("f32") => Activations::F32,
                Some("q8") => Activations::Q8,
                _ => {
                    return Err(bad(format!(
                        "firmware.activations = {v:?} is not \"f32\" or \"q8\""
                    )))
                }
            },
        };
        let optional_string = |key: &str| -> Result<Option<String>, PlanError> {
            match get(key) {
                Err(_) => Ok(None),
                Ok(v) => v
                    .as_str()
                    .map(|v| Some(v.to_string()))
                    .ok_or_else(|| bad(format!("{key} must be a string"))),
            }
        };
        let transport = match optional_string("transport")?.as_deref() {
            None | Some("semihosting") => Transport::Semihosting,
            Some("uart") => Transport::Uart,
            Some("usb") => Transport::Usb,
            Some(t) => {
                return Err(bad(format!(
                    "transport = {t:?} is not \"uart\", \"usb\" or \"semihosting\""
                )))
            }
        };
        let region = |name: &str| -> Result<Region, PlanError> {
            let length = int(&format!("memory.{name}.length"))?;
            if length == 0 {
                return Err(bad(format!(
                    "memory.{name}.length is 0: a region holds bytes"
                )));
            }
            Ok(Region {
                origin: int(&format!("memory.{name}.origin"))?,
                length,
            })
        };
        let (flash, ram) = (region("flash")?, region("ram")?);
        let model_region = match get("memory.model") {
            Err(_) => None,
            Ok(_) => Some(region("model")?),
        };
        let mut other_regions = BTreeMap::new();
        let tables = get("memory")?
            .as_table()
            .ok_or_else(|| bad("memory must be a table of regions".into()))?;
        for name in tables.keys() {
            if !["flash", "ram", "model"].contains(&name.as_str()) {
                other_regions.insert(name.clone(), region(name)?);
            }
        }
        let snapshot = match (get("snapshot.origin"), get("snapshot.slot_bytes")) {
            (Err(_), Err(_)) => None,
            (Ok(_), Ok(_)) => {
                let region = SnapshotRegion {
                    origin: int("snapshot.origin")?,
                    slot_bytes: int("snapshot.slot_bytes")?,
                };
                let linked = [
                    ("flash", Some(flash)),
                    ("ram", Some(ram)),
                    ("model", model_region),
                ];
                check_snapshot(&region, &linked).map_err(bad)?;
                Some(region)
            }
            _ => return Err(bad("[snapshot] needs both origin and slot_bytes".into())),
        };
        let sustained_input = match get("uart_sustained_bytes") {
            Err(_) => None,
            Ok(_) => Some(SustainedInput {
                bytes: int("uart_sustained_bytes")?,
                model: optional_string("uart_sustained_model")?
                    .filter(|m| !m.is_empty())
                    .map(PathBuf::from),
            }),
        };
        Ok(Self {
            flash,
            ram,
            model_region,
            other_regions,
            kind: string("kind")?,
            core: string("core")?,
            probe_rs_chip: optional_string("probe_rs_chip")?.unwrap_or_default(),
            rustflags: optional_string("rustflags")?.unwrap_or_default(),
            uart_runner: optional_string("uart_runner")?.filter(|r| !r.is_empty()),
            sustained_input,
            clock_hz: int("clock_hz")?,
            pll_source: optional_string("pll_source")?.filter(|s| !s.is_empty()),
            clocks: optional_string("clocks")?.unwrap_or_default(),
            runner: optional_string("runner")?.unwrap_or_default(),
            transport,
            uart: optional_string("uart")?.filter(|u| !u.is_empty()),
            model: optional_string("model")?
                .filter(|m| !m.is_empty())
                .map(PathBuf::from),
            snapshot,
            name: string("name")?,
            path: path.to_path_buf(),
            target: string("target")?,
            stack_reserve: int("firmware.stack_reserve")?,
            code_reserve: int("firmware.code_reserve")?,
            levels: usize::try_from(int("firmware.levels")?)
                .map_err(|_| bad("firmware.levels is too large".into()))?,
            state: StateType::from_name(&state)
                .ok_or_else(|| bad(format!("firmware.state = {state:?} is not f32 or f16")))?,
            activations,
        })
    }
}

impl BoardProfile {
    /// Every `[memory.*]` region by name: `flash`, `ram`, `model` where there is one, then the
    /// others.
    pub fn regions(&self) -> impl Iterator<Item = (&str, Region)> {
        [("flash", Some(self.flash)), ("ram", Some(self.ram))]
            .into_iter()
            .chain([("model", self.model_region)])
            .filter_map(|(name, r)| Some((name, r?)))
            .chain(self.other_regions.iter().map(|(n, r)| (n.as_str(), *r)))
    }
}

/// The snapshot store must be 4 KiB aligned in both address and slot size, lie in the 32-bit
/// address space, and overlap none of the `linked` regions (those the linker or the model use).
fn check_snapshot(r: &SnapshotRegion, linked: &[(&str, Option<Region>)]) -> Result<(), String> {
    if r.origin % 4096 != 0 || r.slot_bytes % 4096 != 0 || r.slot_bytes == 0 {
        return Err("[snapshot] origin and slot_bytes must be multiples of 4096".into());
    }
    let end = r
        .slot_bytes
        .checked_mul(2)
        .and_then(|b| b.checked_add(r.origin))
        .filter(|&end| end <= u64::from(u32::MAX) + 1)
        .ok_or("[snapshot] region beyond the 32-bit address space")?;
    for (name, m) in linked.iter().filter_map(|(n, m)| Some((n, (*m)?))) {
        if r.origin < m.origin.saturating_add(m.length) && m.origin < end {
            return Err(format!("[snapshot] region overlaps memory.{name}"));
        }
    }
    Ok(())
}
