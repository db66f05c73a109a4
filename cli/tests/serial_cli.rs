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
        stderr.contains("opening the serial port /nonexistent/loglinear-serial-test-port"),
        "{stderr}"
    );
}
