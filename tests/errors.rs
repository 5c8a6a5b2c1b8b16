//! Bad input and GPU failures come back as typed errors, never panics.
#![cfg(not(target_arch = "wasm32"))]

use hotprefix::gpu::Gpu;
use hotprefix::ops::{self, Weight};
use hotprefix::quant::{self, Format};
use hotprefix::Error;

mod dual;

fn gpu() -> Gpu {
    pollster::block_on(dual::gpu())
}

#[test]
fn shape_mismatch_is_a_shape_error() {
    let gpu = gpu();
    pollster::block_on(async {
        let w = quant::quantize(Format::Q4_1, &vec![0.5; 64 * 32]).unwrap();
        let w = Weight::upload(&gpu, "w", Format::Q4_1, &w, 64, 32).await.unwrap();
        let x = gpu.storage("x", 4 * 32).await.unwrap();
        let y = gpu.storage("y", 4 * 64).await.unwrap();
        let mut b = gpu.batch().unwrap();
        match ops::matmul(&mut b, &x, &w, &y, 2) {
            Err(Error::Shape { op: "matmul", detail }) => assert!(detail.contains("x holds 128 bytes, needs 256"), "{detail}"),
            other => panic!("expected a shape error, got {other:?}"),
        }
    });
}

#[test]
fn weights_of_the_wrong_size_are_rejected() {
    let gpu = gpu();
    let err = pollster::block_on(Weight::upload(&gpu, "w", Format::Q8_0, &[0u8; 33], 1, 32)).err();
    assert!(matches!(err, Some(Error::Weights(ref m)) if m.contains("needs 34 bytes, got 33")), "{err:?}");
}

#[test]
fn a_buffer_beyond_the_adapter_limit_is_too_large() {
    let gpu = gpu();
    let too_big = gpu.limits().max_storage_buffer_binding_size.min(gpu.limits().max_buffer_size) + 4;
    let err = pollster::block_on(gpu.storage("huge", too_big)).err();
    assert!(matches!(err, Some(Error::TooLarge { bytes, .. }) if bytes == too_big), "{err:?}");
}

#[test]
fn one_batch_records_at_a_time() {
    let gpu = gpu();
    let first = gpu.batch().unwrap();
    assert!(matches!(gpu.batch().err(), Some(Error::Validation(_))));
    drop(first);
    assert!(gpu.batch().is_ok(), "dropping a batch releases the recorder");
}

#[test]
fn gpu_validation_errors_are_typed() {
    let gpu = gpu();
    // A buffer without STORAGE usage cannot be bound to a storage binding: the GPU API rejects
    // the bind group, and submit() reports it instead of panicking.
    let not_storage = gpu.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("copy only"),
        size: 64,
        usage: wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let ok = pollster::block_on(gpu.storage("b", 64)).unwrap();
    let mut b = gpu.batch().unwrap();
    ops::swiglu(&mut b, &not_storage, &ok, 1, 4).unwrap();
    let err = pollster::block_on(b.submit()).err();
    assert!(matches!(err, Some(Error::Validation(_))), "{err:?}");
    // The context stays usable after a rejected batch.
    assert!(gpu.batch().is_ok());
}

#[test]
fn device_loss_is_reported_as_its_own_error() {
    let gpu = gpu();
    gpu.device().destroy();
    let _ = gpu.device().poll(wgpu::PollType::wait_indefinitely());
    assert!(matches!(gpu.check_alive(), Err(Error::DeviceLost(_))), "{:?}", gpu.check_alive());
    assert!(matches!(gpu.batch().err(), Some(Error::DeviceLost(_))));
    assert_eq!(Error::DeviceLost(String::new()).name(), "DeviceLostError");
}

/// A weight larger than the adapter's storage-binding limit is split by rows across bindings, and
/// the split model computes what the whole one does; a weight of which even one row group (32
/// rows) exceeds the limit is refused with a typed error naming the tensor and both sizes. Here
/// the tiny model meets lowered limits (Gemma-3's 262,144 × 640 embedding meets lavapipe's
/// 128 MiB for real). The same holds through the engine.
#[test]
fn a_tensor_over_the_binding_limit_is_split_or_refused_by_name() {
    use hotprefix::engine::{Engine, EngineOptions};
    use hotprefix::model::{Model, Options};
    let file = hotprefix::testmodel::tiny_gguf(1);
    let logits = |gpu: &Gpu| {
        pollster::block_on(async {
            let opts = Options { all_logits: true, chunk: 4, context: Some(64) };
            let m = Model::load(gpu, &file, opts).await.expect("load");
            let kv = m.kv_cache(gpu, 4, 16).await.unwrap();
            let mut seq = kv.sequence(8);
            let mut rows = Vec::new();
            m.score(gpu, &kv, &mut seq, &[3, 17, 99, 5, 250, 7], |_, r| rows.extend_from_slice(r)).await.unwrap();
            rows
        })
    };
    let whole = logits(&gpu());
    // token_embd: 320 rows × 96 Q8_0 values, 26 words a row on the GPU: 32 rows are 3,328 bytes,
    // so a 24 KiB binding holds seven row groups: 2 parts (the small context, chunk and KV keep
    // every other buffer under it).
    let mut small = gpu();
    small.set_binding_limit(24 << 10);
    assert_eq!(logits(&small), whole, "the split model's logits are the whole model's");
    let group = 32 * 26 * 4;
    let mut gpu = gpu();
    gpu.set_binding_limit(2 << 10);
    match pollster::block_on(Model::load(&gpu, &file, Options::default())) {
        Err(Error::TooLarge { what, bytes, limit }) => {
            assert!(what.starts_with("token_embd"), "{what}");
            assert_eq!((bytes, limit), (group, 2 << 10));
            let msg = Error::TooLarge { what, bytes, limit }.to_string();
            assert!(msg.contains("token_embd") && msg.contains(&group.to_string()) && msg.contains("2048"), "{msg}");
        }
        Err(e) => panic!("expected TooLarge for token_embd, got {e}"),
        Ok(_) => panic!("a weight whose row group is {group} bytes loaded under a 2 KiB binding limit"),
    }
    match pollster::block_on(Engine::load(gpu, &file, EngineOptions::default())) {
        Err(Error::TooLarge { what, .. }) => assert!(what.starts_with("token_embd"), "{what}"),
        Err(e) => panic!("expected TooLarge for token_embd, got {e}"),
        Ok(_) => panic!("the engine loaded a tensor over the binding limit"),
    }
}

#[test]
fn a_kv_budget_beyond_the_adapter_limit_is_its_own_error() {
    use hotprefix::engine::{Engine, EngineOptions};
    let file = hotprefix::testmodel::tiny_gguf(1);
    let opts = EngineOptions { kv_budget_mb: Some(1e7), ..EngineOptions::default() };
    match pollster::block_on(Engine::load(gpu(), &file, opts)) {
        Err(e @ Error::KvBudgetTooLarge { budget_mb, bytes, limit }) => {
            assert!(budget_mb == 1e7 && bytes > limit, "{e}");
            assert_eq!(e.name(), "KvBudgetTooLargeError");
        }
        Err(e) => panic!("expected KvBudgetTooLarge, got {e}"),
        Ok(_) => panic!("a 10 TB KV budget loaded"),
    }
}
