//! The three trained Shakespeare models reproduce their golden greedy continuations byte for
//! byte, with the logits of every greedy step within the model tolerance.

use loglinear_converter::Checkpoint;
use loglinear_runtime::sampler::{Sampler, SamplerConfig};
use loglinear_runtime::{Session, SessionConfig};
use loglinear_tests::*;

#[test]
fn trained_models_reproduce_greedy_continuations() {
    let mut dirs: Vec<_> = std::fs::read_dir(models_dir())
        .expect("models folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("prompts/expected.safetensors").is_file())
        .collect();
    dirs.sort();
    assert!(
        dirs.len() >= 3,
        "expected the three trained models in {}",
        models_dir().display()
    );
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let ckpt = Checkpoint::load(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
        let model = ckpt.model().unwrap();
        let exp = read_arrays(&dir.join("prompts/expected.safetensors"));
        let prompt = get(&exp, "prompt_ids", &name).ids();
        let greedy = get(&exp, "greedy_ids", &name).ids();
        let step_logits = get(&exp, "greedy_step_logits", &name);
        let v = model.config().vocab_size;

        let cfg = SessionConfig::default();
        let mut arena = vec![0u8; Session::<f32>::arena_bytes(&model, &cfg).unwrap()];
        let mut s = Session::<f32>::new(&model, &mut arena, cfg).unwrap();
        for &id in &prompt {
            s.step(id).unwrap();
        }
        assert_close(
            s.logits(),
            &get(&exp, "last_prompt_logits", &name).data,
            tol::MODEL,
            &format!("{name} last prompt logits"),
        );
        let mut sampler = Sampler::new(SamplerConfig::default());
        let mut scratch = vec![0u32; v];
        let mut produced = Vec::new();
        for (i, &want) in greedy.iter().enumerate() {
            assert_close(
                s.logits(),
                &step_logits.data[i * v..][..v],
                tol::MODEL,
                &format!("{name} greedy step {i}"),
            );
            let next = sampler.sample(s.logits(), &mut scratch).unwrap();
            produced.push(next as u8);
            assert_eq!(
                next,
                want,
                "{name}: greedy byte {i} differs; so far {:?}",
                String::from_utf8_lossy(&produced)
            );
            s.step(next).unwrap();
        }
        eprintln!("{name}: {:?}", String::from_utf8_lossy(&produced));
    }
}
