//! Unbounded streaming: a session decodes 2^20 = 1,048,576 tokens, fed its own samples, and
//! at every step the logits are finite, the live-level count is what the capacity policy
//! (`LevelPolicy::live_count`) says and what an independent bucket simulation of the
//! saturating Fenwick tree says, exactly the live levels hold data (the others are zero), and
//! after the capacity is reached the heap does not grow and no step allocates. The heap is
//! counted by this test's global allocator, exactly; the resident set size is reported
//! beside it but not asserted, because it moves with page faults that are not the session's
//! (code pages touched for the first time, the test harness's own threads).
//!
//! `stream_a_million_tokens_on_the_microbit_model_f32_state` and `..._f16_state` run in every
//! test run on the small test model (`models/tiny-ll-gdn-microbit-q8_0.gguf`), with an f32
//! state at 15 levels (saturates at 2^14 tokens) and an f16 state at 4 levels (saturates at 8
//! tokens).
//! `stream_a_million_tokens_on_the_default_model` is the same on the default model
//! (`models/ll-gdn-mcu-q8_0.gguf`, f32 state, 15 levels); it takes about 27 minutes, so it is
//! ignored; run it with
//! `cargo test --release -p loglinear-tests --test unbounded_stream -- --ignored --nocapture`.
//! Times are in BENCHMARKS.md.

use loglinear_converter::model_source::IndexedGguf;
use loglinear_runtime::sampler::{Sampler, SamplerConfig};
use loglinear_runtime::{Model, Session, SessionConfig, StateElem};
use loglinear_tests::repo_root;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Instant;

/// The system allocator, counting the live heap bytes and the allocations of each thread
/// (the harness's own threads allocate too, for example to warn of a slow test).
struct CountingAlloc;

thread_local! {
    static LIVE_BYTES: Cell<i64> = const { Cell::new(0) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// Adds `bytes` to this thread's live bytes and `allocations` to its count. A thread being
/// torn down has no counters left and is not counted.
fn count(bytes: i64, allocations: u64) {
    let _ = LIVE_BYTES.try_with(|live| live.set(live.get() + bytes));
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + allocations));
}

// SAFETY: every call forwards to `System` with the same arguments; the counters are
// const-initialised thread-locals without destructors, so counting never allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as i64, 1);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System` shares.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as i64), 0);
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as i64 - layout.size() as i64, 1);
        // SAFETY: as for `dealloc`; `new_size` is the caller's, checked by its contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// This thread's live heap bytes and allocations so far, from [`CountingAlloc`].
fn heap() -> (i64, u64) {
    (LIVE_BYTES.get(), ALLOCATIONS.get())
}

/// Tokens decoded per stream.
const TOKENS: u64 = 1 << 20;

/// The model file's bytes in u64 words (GGUF tensors are read in place and need alignment).
/// The model reads its weights through the host's indexed lookup (`IndexedGguf`), as the
/// `loglinear` CLI does.
fn read_aligned(rel: &str) -> Vec<u64> {
    let path = repo_root().join(rel);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut words = vec![0u64; bytes.len().div_ceil(8) + 1];
    bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(&bytes);
    words.truncate(bytes.len().div_ceil(8));
    words.push(bytes.len() as u64);
    words
}

/// The bytes of [`read_aligned`]'s words.
fn as_bytes(words: &[u64]) -> &[u8] {
    let (len, data) = words.split_last().unwrap();
    &bytemuck::cast_slice::<u64, u8>(data)[..*len as usize]
}

/// Resident set size of this process, in pages (`/proc/self/statm`, second field).
fn resident_pages() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    statm.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Token counts per level of the saturating Fenwick tree, simulated directly from its
/// definition (the merge at token t > 0 moves levels below min(tz(t) + 1, top) into that
/// level; each token then enters level 0), independently of `LevelPolicy`.
struct Buckets {
    counts: Vec<u64>,
}

impl Buckets {
    fn step(&mut self, t: u64) {
        let top = self.counts.len() - 1;
        if t > 0 && top > 0 {
            let target = (t.trailing_zeros() as usize + 1).min(top);
            let moved: u64 = self.counts[..target].iter().sum();
            self.counts[..target].fill(0);
            self.counts[target] += moved;
        }
        self.counts[0] += 1;
    }

    fn live(&self) -> usize {
        self.counts.iter().filter(|&&c| c > 0).count()
    }
}

/// What one stream measured.
struct Report {
    seconds: f64,
    heap_at_capacity: i64,
    rss_at_capacity_kib: u64,
    rss_end_kib: u64,
    distinct_tokens: usize,
}

/// Decodes [`TOKENS`] tokens with the state stored as `E` and `levels` levels, each token
/// sampled (seeded, temperature 1, top-k 40) from the logits of the step before, checking every step.
fn stream<E: StateElem>(model: &Model<'_>, levels: usize, seed: u64) -> Report {
    let cfg = SessionConfig {
        levels: Some(levels),
        ..Default::default()
    };
    let mut arena = vec![0u8; Session::<E>::arena_bytes(model, &cfg).unwrap()];
    let mut session = Session::<E>::new(model, &mut arena, cfg).unwrap();
    let policy = session.policy();
    let c = *model.config();
    let level_len = c.num_heads * c.head_k_dim * c.head_v_dim;
    let mut sampler = Sampler::new(SamplerConfig {
        temperature: 1.0,
        top_k: 40,
        top_p: 1.0,
        seed,
    });
    let mut scratch = vec![0u32; c.vocab_size];
    let mut buckets = Buckets {
        counts: vec![0; levels],
    };
    let mut seen = vec![false; c.vocab_size];
    let page_kib = 4;
    let mut rss_at_capacity = None;
    let mut heap_at_capacity = None;
    let allocated = session.allocated_state_bytes();
    let mut token = u32::from(b'\n');
    let start = Instant::now();
    for t in 0..TOKENS {
        let logits = session.step(token).unwrap();
        assert!(
            logits.iter().all(|x| x.is_finite()),
            "{} levels={levels}: non-finite logit at t={t}",
            E::NAME
        );
        token = sampler.sample(logits, &mut scratch).unwrap();
        seen[token as usize] = true;

        // The live levels: the session, the policy and the simulation agree...
        buckets.step(t);
        let live = policy.live_count(t);
        assert_eq!(live, buckets.live(), "policy vs simulation at t={t}");
        assert_eq!(session.live_levels(), live, "session vs policy at t={t}");
        assert_eq!(
            buckets.counts.iter().sum::<u64>(),
            t + 1,
            "tokens lost at t={t}"
        );
        // ...and exactly the live levels hold data in every layer.
        for layer in 0..c.num_layers {
            let state = session.layer_state(layer);
            for (l, level) in state.chunks_exact(level_len).enumerate() {
                let nonzero = level.iter().any(|x| x.load() != 0.0);
                let live = buckets.counts[l] > 0;
                // A dead level is zero (merged away); level 0 always holds the new token.
                // (A live upper level could in principle decay to zero in f16, so it is not
                // required to be non-zero.)
                assert!(
                    live || !nonzero,
                    "{} t={t} layer={layer} level={l}: a dead level holds data",
                    E::NAME
                );
                assert!(
                    l > 0 || nonzero,
                    "{} t={t} layer={layer}: level 0 is empty",
                    E::NAME
                );
            }
        }
        assert_eq!(session.allocated_state_bytes(), allocated);

        // Memory: the state is fixed; once it is full, no step allocates.
        if t + 1 == policy.exact_capacity().max(1 << 14) {
            rss_at_capacity = Some(resident_pages());
            heap_at_capacity = Some(heap());
        }
        if t % (1 << 16) == 0 {
            if let Some((bytes, allocations)) = heap_at_capacity {
                let (bytes_now, allocations_now) = heap();
                assert!(
                    bytes_now <= bytes && allocations_now == allocations,
                    "{} t={t}: heap {bytes_now} B after {allocations_now} allocations, \
                     {bytes} B after {allocations} when full",
                    E::NAME,
                );
            }
            for layer in 0..c.num_layers {
                assert!(session
                    .layer_state(layer)
                    .iter()
                    .all(|x| x.load().is_finite()));
                assert!(session.conv_state(layer).iter().all(|x| x.is_finite()));
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    assert_eq!(session.t(), TOKENS);
    let (heap_bytes, heap_allocations) = heap_at_capacity.unwrap();
    assert_eq!(
        heap(),
        (heap_bytes, heap_allocations),
        "the heap moved after capacity"
    );
    let rss_at_capacity = rss_at_capacity.unwrap();
    let rss_end = resident_pages();
    Report {
        seconds,
        heap_at_capacity: heap_bytes,
        rss_at_capacity_kib: rss_at_capacity * page_kib,
        rss_end_kib: rss_end * page_kib,
        distinct_tokens: seen.iter().filter(|&&s| s).count(),
    }
}

fn print(model: &str, state: &str, levels: usize, r: &Report) {
    eprintln!(
        "{model} state={state} levels={levels}: {TOKENS} tokens in {:.1} s ({:.0} tokens/s), \
         heap {} B from capacity to the end, RSS {} KiB when full, {} KiB at the end, \
         {} distinct tokens sampled",
        r.seconds,
        TOKENS as f64 / r.seconds,
        r.heap_at_capacity,
        r.rss_at_capacity_kib,
        r.rss_end_kib,
        r.distinct_tokens
    );
}

/// The small test model, which every test run streams: once per state type, each its own test
/// so that the harness runs the two side by side (the heap is counted per thread).
const MICROBIT_MODEL: &str = "models/tiny-ll-gdn-microbit-q8_0.gguf";

#[test]
fn stream_a_million_tokens_on_the_microbit_model_f32_state() {
    let words = read_aligned(MICROBIT_MODEL);
    let gguf = IndexedGguf::parse(as_bytes(&words)).unwrap();
    let model = gguf.model().unwrap();
    let r = stream::<f32>(&model, 15, 1);
    print(MICROBIT_MODEL, "f32", 15, &r);
}

#[test]
fn stream_a_million_tokens_on_the_microbit_model_f16_state() {
    let words = read_aligned(MICROBIT_MODEL);
    let gguf = IndexedGguf::parse(as_bytes(&words)).unwrap();
    let model = gguf.model().unwrap();
    let r = stream::<half::f16>(&model, 4, 2);
    print(MICROBIT_MODEL, "f16", 4, &r);
}

#[test]
#[ignore = "about 27 minutes: a benchmark"]
fn stream_a_million_tokens_on_the_default_model() {
    let file = "models/ll-gdn-mcu-q8_0.gguf";
    let words = read_aligned(file);
    let gguf = IndexedGguf::parse(as_bytes(&words)).unwrap();
    let model = gguf.model().unwrap();
    let r = stream::<f32>(&model, 15, 1);
    print(file, "f32", 15, &r);
}
