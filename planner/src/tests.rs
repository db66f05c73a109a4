use super::*;
use std::path::Path;

const GOOD: &str = r#"
name = "test-board"
kind = "qemu"
core = "cortex-m4f"
clock_hz = 25_000_000
target = "thumbv7em-none-eabihf"
[memory.flash]
origin = 0x0
length = 0x0040_0000
[memory.ram]
origin = 0x2000_0000
length = 0x0040_0000
[firmware]
state = "f16"
levels = 15
stack_reserve = 65536
code_reserve = 262144
"#;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// The shipped model, in u64 words (the reader wants aligned bytes), and its length.
fn model_words() -> (Vec<u64>, usize) {
    let bytes = std::fs::read(repo("models/ll-gdn-mcu-q8_0.gguf")).unwrap();
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(&bytes);
    (words, bytes.len())
}

fn with_board(ram: u64, f: impl FnOnce(&BoardProfile, &Model<'_>, u64)) {
    let mut b = BoardProfile::parse(GOOD, Path::new("t.toml")).unwrap();
    b.ram.length = ram;
    let (words, n) = model_words();
    let g = GgufModel::parse(&bytemuck::cast_slice::<u64, u8>(&words)[..n]).unwrap();
    let m = g.model().unwrap();
    f(&b, &m, n as u64);
}

#[test]
fn parses_a_profile() {
    let b = BoardProfile::parse(GOOD, Path::new("t.toml")).unwrap();
    assert_eq!(b.ram.origin, 0x2000_0000);
    assert_eq!(b.flash.length, 4 << 20);
    assert_eq!(b.state, StateType::F16);
    assert_eq!(b.levels, 15);
    assert_eq!(b.model_region, None);
    assert!(b.other_regions.is_empty());
    let names: Vec<&str> = b.regions().map(|(n, _)| n).collect();
    assert_eq!(names, ["flash", "ram"]);
    // Every [memory.*] table is a region; `model` is the model's own.
    let text = format!("{GOOD}[memory.model]\norigin = 0x3800_0000\nlength = 8\n[memory.boot2]\norigin = 1\nlength = 2\n");
    let b = BoardProfile::parse(&text, Path::new("t.toml")).unwrap();
    let model = Region {
        origin: 0x3800_0000,
        length: 8,
    };
    assert_eq!(b.model_region, Some(model));
    let names: Vec<&str> = b.regions().map(|(n, _)| n).collect();
    assert_eq!(names, ["flash", "ram", "model", "boot2"]);
    assert_eq!(
        b.other_regions["boot2"],
        Region {
            origin: 1,
            length: 2
        }
    );
    let bad = format!("{GOOD}[memory.extra]\norigin = 1\n");
    let e = BoardProfile::parse(&bad, Path::new("t.toml")).unwrap_err();
    assert!(
        e.to_string().contains("memory.extra.length is missing"),
        "{e}"
    );
}

#[test]
fn parses_transport_uart_model_and_snapshot() {
    let b = BoardProfile::parse(GOOD, Path::new("t.toml")).unwrap();
    assert_eq!(b.transport, Transport::Semihosting);
    assert_eq!(
        (b.uart.as_deref(), b.model.as_deref(), b.snapshot),
        (None, None, None)
    );
    let top = "transport = \"uart\"\nuart = \"cmsdk-apb\"\nmodel = \"models/x.gguf\"\n";
    let text = format!("{top}{GOOD}[snapshot]\norigin = 0x2100_0000\nslot_bytes = 0x1000\n");
    let b = BoardProfile::parse(&text, Path::new("t.toml")).unwrap();
    assert_eq!(b.transport, Transport::Uart);
    assert_eq!(b.uart.as_deref(), Some("cmsdk-apb"));
    assert_eq!(b.model.as_deref(), Some(Path::new("models/x.gguf")));
    assert_eq!(
        b.snapshot,
        Some(SnapshotRegion {
            origin: 0x2100_0000,
            slot_bytes: 0x1000
        })
    );
    for (snapshot, want) in [
        ("origin = 0x2100_0000\n", "needs both"),
        (
            "origin = 0x2100_0100\nslot_bytes = 0x1000\n",
            "multiples of 4096",
        ),
        (
            "origin = 0x2000_0000\nslot_bytes = 0x1000\n",
            "overlaps memory.ram",
        ),
        (
            "origin = 0xFFFF_F000\nslot_bytes = 0x1000\n",
            "32-bit address space",
        ),
    ] {
        let text = format!("{GOOD}[snapshot]\n{snapshot}");
        let e = BoardProfile::parse(&text, Path::new("t.toml")).unwrap_err();
        assert!(e.to_string().contains(want), "{want}: {e}");
    }
    let e = BoardProfile::parse(&format!("transport = \"spi\"\n{GOOD}"), Path::new("t.toml"))
        .unwrap_err();
    assert!(e.to_string().contains("is not \"uart\", \"usb\""), "{e}");
}

#[test]
fn parses_usb_transport_and_clocks() {
    let top = "transport = \"usb\"\nclocks = \"HSI /4 x50 /2 = 400 MHz\"\n";
    let b = BoardProfile::parse(&format!("{top}{GOOD}"), Path::new("t.toml")).unwrap();
    assert_eq!(b.transport, Transport::Usb);
    assert_eq!(b.transport.name(), "usb");
    assert_eq!(
        (b.clock_hz, b.clocks.as_str()),
        (25_000_000, "HSI /4 x50 /2 = 400 MHz")
    );
    let no_clock = GOOD.replace("clock_hz = 25_000_000\n", "");
    let e = BoardProfile::parse(&no_clock, Path::new("t.toml")).unwrap_err();
    assert!(e.to_string().contains("clock_hz is missing"), "{e}");
}

/// Every board in `boards/` reads with this one parser, the Linux board as a [`Board::Linux`].
#[test]
fn every_board_in_the_repository_parses() {
    let (mut firmware, mut linux) = (0, 0);
    for name in Board::list(Some(&repo("boards"))) {
        let dir = repo("boards").join(&name);
        match Board::find(dir.to_str().unwrap()).unwrap_or_else(|e| panic!("{e}")) {
            Board::Firmware(b) => {
                assert!(!b.runner.is_empty(), "{name}: no runner");
                assert!(!b.core.is_empty(), "{name}: no core");
                assert_eq!(b.name, name);
                firmware += 1;
            }
            Board::Linux(b) => {
                assert!(!b.linker.is_empty(), "{name}: no linker");
                linux += 1;
            }
        }
    }
    assert!(firmware >= 10, "only {firmware} firmware boards");
    assert_eq!(linux, 1);
    let l475 = BoardProfile::find(repo("boards/b-l475e-iot01a").to_str().unwrap()).unwrap();
    let sustained = l475
        .sustained_input
        .expect("b-l475e-iot01a runs the sustained-input test");
    assert_eq!(sustained.bytes, 65536);
    assert!(l475.uart_runner.unwrap().contains("-serial stdio"));
}

#[test]
fn malformed_profiles_are_typed_errors() {
    for (text, want) in [
        ("name = ", "malformed"),
        (
            &GOOD.replace("levels = 15", "") as &str,
            "firmware.levels is missing",
        ),
        (
            &GOOD.replace("levels = 15", "levels = \"x\""),
            "non-negative integer",
        ),
        (&GOOD.replace("\"f16\"", "\"bf16\""), "not f32 or f16"),
        (
            &GOOD.replace("length = 0x0040_0000", "length = 0"),
            "memory.flash.length is 0",
        ),
    ] {
        let e = BoardProfile::parse(text, Path::new("t.toml")).unwrap_err();
        assert!(matches!(e, PlanError::MalformedProfile { .. }), "{e}");
        assert!(e.to_string().contains(want), "{e}");
    }
}

#[test]
fn a_linux_board_is_not_planned() {
    let text = GOOD.replace("kind = \"qemu\"", "kind = \"linux\"");
    let e = BoardProfile::parse(&text, Path::new("t.toml")).unwrap_err();
    assert!(matches!(e, PlanError::LinuxBoard { .. }), "{e}");
    assert!(e.to_string().contains("t.toml is a Linux board"), "{e}");
}

#[test]
fn unknown_board_lists_the_known_ones() {
    let e = BoardProfile::find("no-such-board").unwrap_err();
    assert!(matches!(e, PlanError::UnknownBoard { .. }), "{e}");
    assert!(e.to_string().contains("mps2-an386"), "{e}");
}

#[test]
fn finds_boards_by_name_and_folder() {
    let by_name = BoardProfile::find("mps2-an500").unwrap();
    let dir = repo("boards/mps2-an500");
    let by_dir = BoardProfile::find(dir.to_str().unwrap()).unwrap();
    let by_file = BoardProfile::read(&dir.join("board.toml")).unwrap();
    assert_eq!(by_name.name, "mps2-an500");
    assert_eq!(by_dir.levels, by_name.levels);
    assert_eq!(by_file, by_dir);
}

#[test]
fn model_bytes_that_do_not_parse_are_a_typed_error() {
    let b = BoardProfile::find("mps2-an386").unwrap();
    let e = plan_file_bytes(&b, b"GGUF not really a model", None, None, None).unwrap_err();
    assert!(matches!(e, PlanError::ModelFile(_)), "{e}");
}

#[test]
fn plan_of_file_bytes_equals_plan_of_the_model() {
    let b = BoardProfile::find("mps2-an386").unwrap();
    let (words, n) = model_words();
    // One byte off the u64 alignment: plan_file_bytes copies into aligned storage.
    let mut shifted = vec![0u8; n + 1];
    shifted[1..].copy_from_slice(&bytemuck::cast_slice::<u64, u8>(&words)[..n]);
    let from_bytes = plan_file_bytes(&b, &shifted[1..], None, None, Some(100)).unwrap();
    let g = GgufModel::parse(&bytemuck::cast_slice::<u64, u8>(&words)[..n]).unwrap();
    let from_model = plan_model(&b, &g.model().unwrap(), n as u64, None, None, Some(100)).unwrap();
    assert_eq!(from_bytes, from_model);
    assert_eq!(from_bytes.vocab_size, 256);
}

#[test]
fn figures_come_from_the_runtime() {
    with_board(4 << 20, |b, m, n| {
        for (st, lv) in [
            (StateType::F16, 15),
            (StateType::F32, 12),
            (StateType::F32, 2),
        ] {
            let p = plan_model(b, m, n, Some(st), Some(lv), Some(1000)).unwrap();
            let cfg = SessionConfig {
                levels: Some(lv),
                ..Default::default()
            };
            let want = match st {
                StateType::F32 => Session::<f32>::arena_bytes(m, &cfg),
                StateType::F16 => Session::<half::f16>::arena_bytes(m, &cfg),
            }
            .unwrap() as u64;
            assert_eq!(p.session.arena, want);
            let s = p.session;
            assert_eq!(s.state_allocated + s.conv + s.scratch, s.arena);
            // t = 999 = 0b1111100111: level 0 plus live levels among 1..lv.
            let live = LevelPolicy::new(lv).unwrap().live_count(999);
            assert_eq!(s.live_levels, live);
            assert_eq!(s.state_live * lv as u64, s.state_allocated * live as u64);
            assert_eq!(p.flash_total(), n + b.code_reserve);
            assert_eq!(p.stack_estimate(), 4 * 256 + b.stack_reserve);
            assert_eq!(
                p.ram_total(),
                s.arena + other_statics(&p.board) + p.stack_estimate()
            );
        }
    });
}

#[test]
fn documented_arena_sizes() {
    // The figures in boards/*/board.toml and firmware/README.md.
    with_board(4 << 20, |b, m, n| {
        let p = plan_model(b, m, n, Some(StateType::F16), Some(15), None).unwrap();
        assert_eq!(p.session.arena, 2_009_243);
        assert_eq!(p.context, 16384);
        let p = plan_model(b, m, n, Some(StateType::F32), Some(12), None).unwrap();
        assert_eq!(p.session.arena, 3_188_893);
    });
}

#[test]
fn limits_shrink_with_ram() {
    // 4 MiB: everything fits, unbounded.
    with_board(4 << 20, |b, m, n| {
        let p = plan_model(b, m, n, None, None, None).unwrap();
        assert!(p.fits());
        assert_eq!(p.context_limit(), ContextLimit::Unbounded);
        assert_eq!(
            p.max_levels,
            [(StateType::F32, Some(15)), (StateType::F16, Some(15))]
        );
        assert!(p.to_string().ends_with("verdict: fits"), "{p}");
    });
    // 1 MiB: f16 15 levels does not fit; the largest level count that does is exact.
    with_board(1 << 20, |b, m, n| {
        let p = plan_model(b, m, n, Some(StateType::F16), Some(15), None).unwrap();
        assert!(!p.fits());
        assert_eq!(p.ram_over(), p.ram_total() - (1 << 20));
        assert_eq!(p.flash_over(), 0);
        let ContextLimit::Exact { levels, tokens } = p.context_limit() else {
            panic!("{:?}", p.context_limit())
        };
        assert_eq!(Some(levels), p.max_levels[1].1);
        assert_eq!(tokens, 1 << (levels - 1));
        let fit = plan_model(b, m, n, Some(StateType::F16), Some(levels), None).unwrap();
        assert!(fit.fits());
        let over = plan_model(b, m, n, Some(StateType::F16), Some(levels + 1), None).unwrap();
        assert!(!over.fits());
        assert!(p.max_levels[0].1 < p.max_levels[1].1);
        // The report says what does not fit and by how much, and what would fit.
        let report = p.to_string();
        let ram_over = format!("DOES NOT FIT, {} B over", p.ram_over());
        let verdict = format!("verdict: does NOT fit (RAM {} B over)", p.ram_over());
        let largest = format!("largest context: {tokens} tokens exact (f16 state, {levels} levels");
        for want in [&ram_over, &verdict, &largest] {
            assert!(report.contains(want.as_str()), "{want:?} not in\n{report}");
        }
    });
    // Too small for anything, and the flash too.
    with_board(64 << 10, |b, m, n| {
        let mut b = b.clone();
        b.flash.length = 1 << 20;
        let p = plan_model(&b, m, n, None, Some(2), None).unwrap();
        assert_eq!(p.context_limit(), ContextLimit::None);
        assert_eq!(p.flash_over(), n + b.code_reserve - (1 << 20));
        let verdict = format!(
            "verdict: does NOT fit (flash {} B over, RAM {} B over)",
            p.flash_over(),
            p.ram_over()
        );
        assert!(p.to_string().ends_with(&verdict), "{p}");
    });
}

#[test]
fn a_model_region_holds_the_model_apart_from_the_code() {
    with_board(4 << 20, |b, m, n| {
        let mut b = b.clone();
        // Code memory too small for the model, but a model region that holds it.
        b.flash.length = b.code_reserve;
        b.model_region = Some(Region {
            origin: 0x3800_0000,
            length: n,
        });
        let p = plan_model(&b, m, n, None, None, None).unwrap();
        assert_eq!(p.flash_total(), b.code_reserve);
        assert_eq!(p.flash_over(), 0);
        assert!(p.fits(), "{p}");
        assert!(
            p.to_string().contains("in its own region at 0x38000000"),
            "{p}"
        );
        // One byte short in the model region, and one in the code memory: both count.
        b.model_region = Some(Region {
            origin: 0x3800_0000,
            length: n - 1,
        });
        b.flash.length = b.code_reserve - 1;
        let p = plan_model(&b, m, n, None, None, None).unwrap();
        assert_eq!(p.flash_over(), 2);
        assert!(!p.fits());
    });
}

#[test]
fn bad_levels_are_a_typed_error() {
    with_board(4 << 20, |b, m, n| {
        for lv in [0, 1, 16] {
            let e = plan_model(b, m, n, None, Some(lv), None).unwrap_err();
            assert!(matches!(e, PlanError::Levels { .. }), "{e}");
        }
    });
}

const QUALITY: &str = "\
# a comment line
context,levels,state,bits_per_byte
1024,15,f32,2.00
1024,15,f16,2.01
1024,4,f16,2.10
1024,4,f32,2.09
16384,15,f32,1.90
16384,3,f16,2.30
16384,4,f16,2.20
16384,4,f32,2.20
";

#[test]
fn quality_tables_parse_and_refuse_bad_rows() {
    let t = QualityTable::parse(QUALITY, Path::new("q.csv")).unwrap();
    assert_eq!(t.rows.len(), 8);
    assert_eq!(
        t.rows[2],
        QualityRow {
            context: 1024,
            levels: 4,
            state: StateType::F16,
            bits_per_byte: 2.10
        }
    );
    for (text, want) in [
        ("a,b\n1,2\n", "columns must be"),
        ("context,levels,state,bits_per_byte\n", "no rows"),
        (
            "context,levels,state,bits_per_byte\n1024,x,f16,2\n",
            "line 2: levels",
        ),
        (
            "context,levels,state,bits_per_byte\n1024,4,f8,2\n",
            "state \"f8\"",
        ),
        (
            "context,levels,state,bits_per_byte\n1024,4,f16,NaN\n",
            "bits_per_byte",
        ),
    ] {
        let e = QualityTable::parse(text, Path::new("q.csv")).unwrap_err();
        assert!(e.to_string().contains(want), "{want}: {e}");
    }
    assert_eq!(
        QualityTable::path_beside(Path::new("models/m-q8_0.gguf")),
        Path::new("models/m-q8_0.levels.csv")
    );
}

#[test]
fn recommends_the_best_measured_setting_that_fits() {
    let t = QualityTable::parse(QUALITY, Path::new("q.csv")).unwrap();
    // Enough RAM for everything: all levels in f32 at their own cost, 0.
    with_board(4 << 20, |b, m, n| {
        let p = plan_model(b, m, n, None, None, None).unwrap();
        let r = recommend(&t, &p, 16384).unwrap();
        assert_eq!(
            (r.row.levels, r.row.state, r.cost),
            (15, StateType::F32, 0.0)
        );
        // A context between the table's: the next larger one measured.
        assert_eq!(recommend(&t, &p, 2000).unwrap().row.context, 16384);
        // Beyond the table: its largest.
        assert_eq!(recommend(&t, &p, 1 << 20).unwrap().row.context, 16384);
    });
    // Room for 4 f16 levels but not 4 f32 ones (nor 15): 4 levels f16; on its tie with
    // 4 f32 the smaller state would win too.
    with_board(4 << 20, |b, m, n| {
        let f16_4 = plan_model(b, m, n, Some(StateType::F16), Some(4), None).unwrap();
        let mut b = b.clone();
        b.ram.length = f16_4.ram_total();
        let p = plan_model(&b, m, n, None, None, None).unwrap();
        assert_eq!(p.max_levels[1], (StateType::F16, Some(4)), "{p}");
        let r = recommend(&t, &p, 16384).unwrap();
        assert_eq!((r.row.levels, r.row.state), (4, StateType::F16));
        assert!((r.cost - 0.30).abs() < 1e-12, "{}", r.cost);
    });
    // Nothing fits: no advice.
    with_board(64 << 10, |b, m, n| {
        let p = plan_model(b, m, n, None, Some(2), None).unwrap();
        assert_eq!(recommend(&t, &p, 1024), None);
    });
}

/// The L475's profile with `clock_hz` and `pll_source` replaced.
fn l4_board(clock_hz: u64, pll_source: Option<&str>) -> BoardProfile {
    let mut board = BoardProfile::find(repo("boards/b-l475e-iot01a").to_str().unwrap()).unwrap();
    board.clock_hz = clock_hz;
    board.pll_source = pll_source.map(str::to_string);
    board
}

#[test]
fn the_l4_pll_makes_the_shipped_clock_exactly() {
    let shipped = BoardProfile::find(repo("boards/b-l475e-iot01a").to_str().unwrap()).unwrap();
    let pll = stm32l4_pll(&shipped).unwrap();
    let sysclk = pll.source.hz() / u64::from(pll.prediv) * u64::from(pll.mul) / u64::from(pll.divr);
    assert_eq!(sysclk, shipped.clock_hz);
    assert_eq!(
        stm32l4_pll(&l4_board(80_000_000, Some("hsi16"))).unwrap(),
        Stm32l4Pll {
            source: Stm32l4PllSource::Hsi16,
            prediv: 1,
            mul: 10,
            divr: 2
        }
    );
    // From MSI at 4 MHz: M = 1, N = 40 (160 MHz VCO), R = 2.
    let msi = stm32l4_pll(&l4_board(80_000_000, Some("msi4"))).unwrap();
    assert_eq!((msi.prediv, msi.mul, msi.divr), (1, 40, 2));
    // 26 MHz: VCO 208 MHz = 16 MHz × 13, R = 8.
    let odd = stm32l4_pll(&l4_board(26_000_000, Some("hsi16"))).unwrap();
    assert_eq!((odd.prediv, odd.mul, odd.divr), (1, 13, 8));
}

#[test]
fn an_l4_clock_the_chip_cannot_make_names_the_board_and_the_key() {
    for (clock_hz, source, key, why) in [
        (
            100_000_000,
            Some("hsi16"),
            "clock_hz = 100000000",
            "above the STM32L4's SYSCLK limit",
        ),
        (
            79_999_999,
            Some("hsi16"),
            "clock_hz = 79999999",
            "cannot be made",
        ),
        // Below the slowest the PLL makes: a 64 MHz VCO divided by 8.
        (
            4_000_000,
            Some("msi4"),
            "clock_hz = 4000000",
            "cannot be made",
        ),
        (
            80_000_000,
            Some("hse"),
            "pll_source = \"hse\"",
            "is not one of",
        ),
        (80_000_000, None, "pll_source is missing", "one of"),
    ] {
        let err = stm32l4_pll(&l4_board(clock_hz, source)).unwrap_err();
        assert!(err.starts_with("board b-l475e-iot01a ("), "{err}");
        assert!(err.contains("board.toml): "), "{err}");
        assert!(err.contains(key), "{err}");
        assert!(err.contains(why), "{err}");
    }
}
