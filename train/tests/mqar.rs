//! MQAR data (Zoology's `multiquery_ar` layout): shapes, key and value ranges, every query's
//! target is the value paired with its key earlier, mask counts, the power-law gaps,
//! determinism per seed, and the accuracy metric.

use loglinear_train::mqar::data::{
    generate, generate_range, mqar_accuracy, mqar_accuracy_from_logits, train_test, MqarConfig,
    MqarError, ZOOLOGY_KV_PAIRS,
};

const EXAMPLES: usize = 64;

#[test]
fn examples_follow_the_zoology_layout() {
    for n in ZOOLOGY_KV_PAIRS {
        let cfg = MqarConfig::zoology(n);
        let b = generate(&cfg, 1234, EXAMPLES).unwrap();
        let (l, half, v) = (256, 4096u32, 8192u32);
        assert_eq!((b.seq_len, b.len()), (l, EXAMPLES));
        assert_eq!(b.inputs.len(), EXAMPLES * l);
        assert_eq!(b.targets.len(), EXAMPLES * l);
        assert_eq!(b.mask.len(), EXAMPLES * l);
        assert_eq!(b.mask.iter().filter(|&&m| m).count(), EXAMPLES * n);
        for e in 0..EXAMPLES {
            let row = e * l..(e + 1) * l;
            let (x, t, m) = (
                &b.inputs[row.clone()],
                &b.targets[row.clone()],
                &b.mask[row],
            );
            assert!(x.iter().all(|&tok| tok < v));
            let keys: Vec<u32> = x[..2 * n].iter().step_by(2).copied().collect();
            let values: Vec<u32> = x[1..2 * n].iter().step_by(2).copied().collect();
            assert!(keys.iter().all(|k| (1..half).contains(k)), "{keys:?}");
            assert!(values.iter().all(|v2| (half..v).contains(v2)), "{values:?}");
            let mut distinct = keys.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), n, "keys repeat");
            let mut distinct = values.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), n, "values repeat");
            // Nothing is scored inside the key-value prefix, and every pair is queried once,
            // at an even offset after it, with its own value as the target.
            assert!(m[..2 * n].iter().all(|&s| !s));
            let mut queried = vec![false; n];
            for p in (0..l).filter(|&p| m[p]) {
                assert_eq!((p - 2 * n) % 2, 0, "query at odd offset {p}");
                let i = keys
                    .iter()
                    .position(|&k| k == x[p])
                    .expect("query is a key");
                assert_eq!(t[p], values[i], "target is the paired value");
                assert!(!queried[i], "key queried twice");
                queried[i] = true;
            }
            assert!(queried.iter().all(|&q| q));
            // Unscored targets are 0 (Zoology's -100).
            assert!(t.iter().zip(m).all(|(&tt, &s)| s || tt == 0));
        }
        let labels = b.labels_i64();
        assert_eq!(
            labels.iter().filter(|&&x| x == -100).count(),
            EXAMPLES * (l - n)
        );
    }
}

#[test]
fn same_seed_same_data_other_seed_other_data() {
    let cfg = MqarConfig::zoology(16);
    let a = generate(&cfg, 7, 8).unwrap();
    assert_eq!(a, generate(&cfg, 7, 8).unwrap());
    assert_ne!(a.inputs, generate(&cfg, 8, 8).unwrap().inputs);
    // Example i depends only on (seed, i): a range is a slice of the whole.
    let r = generate_range(&cfg, 7, 3, 4).unwrap();
    assert_eq!(r.inputs, a.inputs[3 * 256..7 * 256]);
    assert_eq!(r.targets, a.targets[3 * 256..7 * 256]);
    assert_eq!(r.mask, a.mask[3 * 256..7 * 256]);
    // Zoology's test split is seed + 10 and shares no example with training.
    let (train, test) = train_test(&cfg, 7, 8, 8).unwrap();
    assert_eq!(train, a);
    assert_eq!(test, generate(&cfg, 17, 8).unwrap());
    for e in test.inputs.chunks(256) {
        assert!(train.inputs.chunks(256).all(|t| t != e));
    }
}

#[test]
fn gaps_follow_the_power_law() {
    // With power_a = 0.01 the weight of gap g is (g+1)^-0.99: one pair per example, so the
    // query's gap is a single draw; P(gap 0) = 1 / sum_{i=1}^{space} i^-0.99.
    let cfg = MqarConfig {
        num_kv_pairs: 1,
        ..MqarConfig::zoology(1)
    };
    let space = cfg.gap_space();
    assert_eq!(space, 127);
    let z: f64 = (1..=space).map(|i| (i as f64).powf(-0.99)).sum();
    let n = 4000;
    let b = generate(&cfg, 99, n).unwrap();
    let mut counts = vec![0usize; space];
    for m in b.mask.chunks(256) {
        let p = m.iter().position(|&s| s).unwrap();
        counts[(p - 2) / 2] += 1;
    }
    for g in [0usize, 1, 2] {
        let expect = n as f64 * ((g + 1) as f64).powf(-0.99) / z;
        let sd = (expect * (1.0 - expect / n as f64)).sqrt();
        let got = counts[g] as f64;
        assert!(
            (got - expect).abs() < 5.0 * sd,
            "gap {g}: {got} vs {expect:.1}"
        );
    }
    // Uniform gaps with power_a = 1.
    let uniform = MqarConfig {
        power_a: 1.0,
        ..cfg
    };
    let b = generate(&uniform, 99, n).unwrap();
    let zeros = b.mask.chunks(256).filter(|m| m[2]).count() as f64;
    let expect = n as f64 / space as f64;
    assert!(
        (zeros - expect).abs() < 5.0 * expect.sqrt(),
        "{zeros} vs {expect}"
    );
}

#[test]
fn without_random_fill_the_rest_is_zero() {
    let cfg = MqarConfig {
        random_non_queries: false,
        ..MqarConfig::zoology(4)
    };
    let b = generate(&cfg, 3, 4).unwrap();
    for (x, m) in b.inputs.chunks(256).zip(b.mask.chunks(256)) {
        let nonzero = x.iter().filter(|&&t| t != 0).count();
        assert_eq!(nonzero, 8 + m.iter().filter(|&&s| s).count());
    }
}

#[test]
fn bad_settings_are_refused() {
    let ok = MqarConfig::zoology(4);
    for bad in [
        MqarConfig { seq_len: 255, ..ok },
        MqarConfig {
            num_kv_pairs: 65,
            ..ok
        },
        MqarConfig {
            num_kv_pairs: 0,
            ..ok
        },
        MqarConfig {
            vocab_size: 256,
            ..ok
        },
        MqarConfig { power_a: 0.0, ..ok },
        MqarConfig {
            power_a: f64::NAN,
            ..ok
        },
    ] {
        assert!(
            matches!(generate(&bad, 0, 1), Err(MqarError::Config(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn accuracy_counts_only_scored_positions() {
    let cfg = MqarConfig::zoology(8);
    let b = generate(&cfg, 5, 4).unwrap();
    // Perfect predictions at the queries, garbage elsewhere: accuracy 1.
    let perfect: Vec<u32> = b
        .targets
        .iter()
        .zip(&b.mask)
        .map(|(&t, &m)| if m { t } else { 1 })
        .collect();
    let a = mqar_accuracy(&perfect, &b.targets, &b.mask).unwrap();
    assert_eq!((a.correct, a.scored), (32, 32));
    assert_eq!(a.fraction(), 1.0);
    // Wrong at a quarter of the queries.
    let mut pred = perfect.clone();
    for p in (0..pred.len()).filter(|&p| b.mask[p]).step_by(4) {
        pred[p] = 0; // never a value (values are >= vocab / 2)
    }
    assert_eq!(
        mqar_accuracy(&pred, &b.targets, &b.mask)
            .unwrap()
            .fraction(),
        0.75
    );

    // From logits: one-hot rows at the predicted tokens.
    let v = 8192;
    let mut logits = vec![0.0f32; pred.len() * v];
    for (row, &p) in logits.chunks_exact_mut(v).zip(&pred) {
        row[p as usize] = 1.0;
    }
    let from_logits = mqar_accuracy_from_logits(&logits, v, &b.targets, &b.mask).unwrap();
    assert_eq!((from_logits.correct, from_logits.scored), (24, 32));

    assert!(matches!(
        mqar_accuracy(&pred[1..], &b.targets, &b.mask),
        Err(MqarError::LengthMismatch { .. })
    ));
    assert!(matches!(
        mqar_accuracy_from_logits(&logits[1..], v, &b.targets, &b.mask),
        Err(MqarError::LogitShape { .. })
    ));
    assert_eq!(mqar_accuracy(&[], &[], &[]).unwrap().fraction(), 0.0);
}
