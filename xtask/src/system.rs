//! What the tasks install from outside cargo, and how: Rust targets with rustup, Debian
//! packages with apt as root.

use std::collections::BTreeSet;
use std::process::Command;

use anyhow::{bail, Context};

/// `rustup target add` of the targets among `targets` that are not installed.
pub fn ensure_rust_targets<'a>(targets: impl IntoIterator<Item = &'a str>) -> anyhow::Result<()> {
    let installed =
        crate::tasks::output(Command::new("rustup").args(["target", "list", "--installed"]))?;
    let installed: BTreeSet<&str> = installed.lines().map(str::trim).collect();
    let missing: BTreeSet<&str> = targets
        .into_iter()
        .filter(|t| !installed.contains(t))
        .collect();
    if !missing.is_empty() {
        crate::tasks::run(
            Command::new("rustup")
                .args(["target", "add"])
                .args(&missing),
        )?;
    }
    Ok(())
}

/// Whether an executable file `bin` is in a folder of `$PATH` (`command -v`).
pub fn on_path(bin: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| {
        std::fs::metadata(dir.join(bin))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// `apt-get update` and `apt-get install` of `packages`, as root.
pub fn apt_install(packages: &[&str]) -> anyhow::Result<()> {
    let apt = ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get"];
    crate::tasks::run(as_root(&apt)?.args(["update", "-q"]))?;
    crate::tasks::run(
        as_root(&apt)?
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(packages),
    )
}

/// A command run as root: directly when this process is root (CI, the dev machines), else
/// through sudo.
pub fn as_root(argv: &[&str]) -> anyhow::Result<Command> {
    let (program, args) = argv.split_first().context("an empty command line")?;
    if crate::tasks::output(Command::new("id").arg("-u"))?.trim() == "0" {
        let mut cmd = Command::new(program);
        cmd.args(args);
        Ok(cmd)
    } else if on_path("sudo") {
        let mut cmd = Command::new("sudo");
        cmd.args(argv);
        Ok(cmd)
    } else {
        bail!("need root (or sudo) to run: {}", argv.join(" "))
    }
}
