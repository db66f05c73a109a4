//! `loglinear serial` refuses sampling values that the board's parser would refuse, naming the
//! value, before it opens any port.

use std::process::Command;

fn serial(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .arg("serial")
        .args(["--port", "/nonexistent/loglinear-serial-test-port"])
        .args(args)
        .output()
        .expect("run loglinear");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn values_the_board_would_refuse_are_named_before_the_port_is_opened() {
    for (args, named) in [
        (&["--temperature", "0.00012345678"][..], "temperature"),
        (&["--top-p", "0.00012345678"][..], "top_p"),
        (&["-n", "5000"][..], "bad value for n"),
    ] {
        let (ok, stderr) = serial(args);
        assert!(!ok, "{args:?} succeeded");
        assert!(
            stderr.contains("the board would refuse") && stderr.contains(named),
            "{args:?}: {stderr}"
        );
        assert!(
            !stderr.contains("loglinear-serial-test-port"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn accepted_values_go_on_to_open_the_port() {
    // 0.8 and 0.95 read back exactly on the board; the missing port is then the error.
    let (ok, stderr) = serial(&["--temperature", "0.8", "--top-p", "0.95"]);
    assert!(!ok);
    assert!(!stderr.contains("the board would refuse"), "{stderr}");
    assert!(
        stderr.contains("serial port /nonexistent/loglinear-serial-test-port: No such file"),
        "{stderr}"
    );
}

#[test]
fn a_path_that_is_not_a_serial_port_is_refused_untouched() {
    let dir = std::env::temp_dir().join(format!("loglinear-serial-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("not-a-port.txt");
    std::fs::write(&file, b"").unwrap();
    for (port, kind) in [(file.clone(), "regular file"), (dir.clone(), "folder")] {
        let out = Command::new(env!("CARGO_BIN_EXE_loglinear"))
            .arg("serial")
            .arg("--port")
            .arg(&port)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains(&format!("is not a serial port but a {kind}")),
            "{err}"
        );
    }
    assert_eq!(
        std::fs::read(&file).unwrap(),
        b"",
        "protocol bytes written into a file"
    );
}

#[cfg(unix)]
#[test]
fn a_silent_port_times_out_naming_the_port() {
    use serialport::SerialPort;
    let (master, slave) = serialport::TTYPort::pair().expect("a pty pair");
    let name = slave.name().expect("the pty's name");
    drop(slave);
    let start = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .args(["serial", "--port", &name, "--timeout", "1", "-n", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!(
            "serial port {name}: no reply from the board within 1 s"
        )),
        "{err}"
    );
    assert!(start.elapsed().as_secs() < 30, "took {:?}", start.elapsed());
    drop(master);
}

#[test]
fn ports_are_listed() {
    let out = Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .args(["serial", "--list-ports"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
