//! The GPU context: adapter, device and queue, created the same way natively and in the browser,
//! plus the caches every kernel goes through (shader modules, pipelines, bind groups) and the
//! uniform "param arena" that carries each dispatch's small parameter block.
//!
//! Steady state creates nothing: pipelines and bind groups are cached, parameters go into slots
//! of one uniform buffer selected by dynamic offset, readback reuses one staging buffer. A batch
//! records its dispatches into one compute pass (WebGPU makes each dispatch its own usage scope,
//! so no barriers are needed between them) and uploads all their parameters in one write.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

mod batch;
mod buffers;
mod pipelines;

use batch::PARAM_SLOTS;
pub use batch::{Batch, MAX_PARAMS};
pub use pipelines::{Access, Kernel};
use pipelines::{BindKey, Layouts, PipelineKey};

/// Optional adapter features in use. Everything works with all of them off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    /// Timestamp queries: `Gpu::start_profile` (benchmarks) needs them.
    pub timestamps: bool,
    /// The subgroup size, when the device has subgroup operations (natively) and the adapter's
    /// subgroups have one fixed size: `Variant::Lanes` attention needs it.
    pub subgroup_size: Option<u32>,
    /// 64-bit integers in shaders (SHADER_INT64, natively): `Variant::Lanes`' matrix kernels load
    /// two rows' words as one u64 (shaders/matmul_lanes.wgsl).
    pub int64: bool,
    /// The threads a CPU adapter runs workgroups on (lavapipe: one a CPU), natively; 1 on GPUs
    /// and in browsers. The matrix-vector kernels give such an adapter a multiple of it in
    /// workgroups (ops/matmul.rs).
    pub cpu_threads: usize,
}

/// The worker threads of a CPU adapter: lavapipe (llvmpipe) starts one a CPU unless
/// `LP_NUM_THREADS` says otherwise. 1 for GPUs, and in browsers (no way to tell there).
fn cpu_threads(info: &wgpu::AdapterInfo) -> usize {
    if info.device_type != wgpu::DeviceType::Cpu {
        return 1;
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let env = std::env::var("LP_NUM_THREADS").ok().and_then(|v| v.trim().parse::<usize>().ok());
        env.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1)
    }
    #[cfg(target_arch = "wasm32")]
    1
}

/// The GPU: owns the device, queue and every cache. Create one per engine; pass it by reference.
pub struct Gpu {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) info: wgpu::AdapterInfo,
    pub(crate) limits: wgpu::Limits,
    pub(crate) caps: Caps,
    lost: Arc<Mutex<Option<String>>>,
    uncaptured: Arc<Mutex<Option<String>>>,
    modules: RefCell<HashMap<&'static str, wgpu::ShaderModule>>,
    layouts: RefCell<HashMap<(&'static str, &'static str), Layouts>>,
    pipelines: RefCell<HashMap<PipelineKey, wgpu::ComputePipeline>>,
    bind_groups: RefCell<HashMap<BindKey, wgpu::BindGroup>>,
    params: wgpu::Buffer,
    /// Bytes between parameter slots: the adapter's uniform offset alignment (≥ `MAX_PARAMS`).
    param_slot: u64,
    staging: RefCell<Option<wgpu::Buffer>>,
    batch_open: Cell<bool>,
    counters: Cell<Counters>,
    profiler: RefCell<Option<Profiler>>,
}

/// GPU time of each dispatch, from timestamp queries around one pass per dispatch.
struct Profiler {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    capacity: u32,
    labels: Vec<String>,
}

/// What the CPU asked of the GPU since the [`Gpu`] was created (benchmarks read differences).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Compute dispatches recorded.
    pub dispatches: u64,
    /// Compute passes begun.
    pub passes: u64,
    /// Queue submissions.
    pub submits: u64,
    /// Times the CPU waited for the GPU to finish work: buffer maps (readbacks) and `finish`.
    pub waits: u64,
    /// Bytes copied back from the GPU.
    pub read_bytes: u64,
}

impl Gpu {
    /// Finds the best adapter (high-performance preference) and creates a device with the adapter's
    /// own limits and whichever of shader-f16, subgroups and timestamp queries it offers.
    pub async fn new() -> Result<Gpu> {
        #[cfg(target_arch = "wasm32")]
        let backends = wgpu::Backends::BROWSER_WEBGPU;
        #[cfg(not(target_arch = "wasm32"))]
        let backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::all());
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = backends;
        let instance = wgpu::Instance::new(desc);
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                force_fallback_adapter: false,
                compatible_surface: None,
                apply_limit_buckets: false,
            })
            .await
            .map_err(|e| Error::NoAdapter(format!("{e} (backends tried: {backends:?})")))?;
        Self::from_adapter(adapter).await
    }

    /// Creates the device on a given adapter (tests and benchmarks use this to pick one).
    pub async fn from_adapter(adapter: wgpu::Adapter) -> Result<Gpu> {
        let info = adapter.get_info();
        let offered = adapter.features();
        // Subgroup operations only natively: browsers need `enable subgroups;`, which naga rejects;
        // 64-bit integers only natively (WebGPU has none).
        #[cfg(not(target_arch = "wasm32"))]
        let wanted = wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::SUBGROUP | wgpu::Features::SHADER_INT64;
        #[cfg(target_arch = "wasm32")]
        let wanted = wgpu::Features::TIMESTAMP_QUERY;
        let features = offered & wanted;
        let limits = adapter.limits();
        // What the kernels need: attention binds 8 storage buffers (WebGPU's default limit),
        // argmax and matvec_coop use 256-wide workgroups.
        if limits.max_storage_buffers_per_shader_stage < 8
            || limits.max_compute_invocations_per_workgroup < 256
            || limits.max_compute_workgroup_size_x < 256
        {
            return Err(Error::AdapterLimits(format!(
                "{} storage buffers per shader stage and {} invocations per workgroup; hotprefix needs 8 and 256",
                limits.max_storage_buffers_per_shader_stage, limits.max_compute_invocations_per_workgroup
            )));
        }
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("hotprefix"),
                required_features: features,
                required_limits: limits.clone(),
                experimental_features: wgpu::ExperimentalFeatures::disabled(),
                memory_hints: wgpu::MemoryHints::Performance,
                trace: wgpu::Trace::Off,
            })
            .await
            .map_err(|e| Error::RequestDevice(e.to_string()))?;
        let lost = Arc::new(Mutex::new(None));
        let lost_cb = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            if let Ok(mut l) = lost_cb.lock() {
                *l = Some(format!("{reason:?}: {msg}"));
            }
        });
        // Errors outside any scope must not panic (wgpu's default); keep the first one and report
        // it from the next checked call.
        let uncaptured = Arc::new(Mutex::new(None));
        let unc = uncaptured.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut u) = unc.lock() {
                u.get_or_insert_with(|| e.to_string());
            }
        }));
        let param_slot = (limits.min_uniform_buffer_offset_alignment as u64).max(MAX_PARAMS as u64).next_power_of_two();
        let params = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("param arena"),
            size: param_slot * PARAM_SLOTS,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let fixed = info.subgroup_min_size == info.subgroup_max_size && info.subgroup_min_size.is_power_of_two();
        let caps = Caps {
            timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
            subgroup_size: (features.contains(wgpu::Features::SUBGROUP) && fixed).then_some(info.subgroup_min_size),
            int64: features.contains(wgpu::Features::SHADER_INT64),
            cpu_threads: cpu_threads(&info),
        };
        Ok(Gpu {
            device,
            queue,
            info,
            limits,
            caps,
            lost,
            uncaptured,
            modules: RefCell::default(),
            layouts: RefCell::default(),
            pipelines: RefCell::default(),
            bind_groups: RefCell::default(),
            params,
            param_slot,
            staging: RefCell::new(None),
            batch_open: Cell::new(false),
            counters: Cell::default(),
            profiler: RefCell::new(None),
        })
    }

    /// One line naming the adapter, its backend and optional features, for logs and benchmarks.
    pub fn describe(&self) -> String {
        // Browsers hide the adapter's name; say what it is instead of printing nothing.
        let name = if self.info.name.is_empty() { "WebGPU adapter" } else { self.info.name.as_str() };
        format!(
            "{} ({:?} {:?}, driver {} {}; timestamps={}; subgroups={}; int64={}; max binding {} MiB)",
            name,
            self.info.device_type,
            self.info.backend,
            self.info.driver,
            self.info.driver_info,
            self.caps.timestamps,
            self.caps.subgroup_size.map_or("no".to_string(), |n| n.to_string()),
            self.caps.int64,
            self.limits.max_storage_buffer_binding_size >> 20
        )
    }

    /// The adapter: name, backend, device type, driver.
    pub fn info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    /// The most bytes one storage buffer may hold and bind: the smaller of the binding and buffer
    /// limits (weights larger than this are split by rows, `ops::Weight`).
    pub fn binding_limit(&self) -> u64 {
        self.limits.max_storage_buffer_binding_size.min(self.limits.max_buffer_size)
    }

    /// The device's limits (the adapter's own, as requested).
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }

    /// The optional features in use.
    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// The wgpu device (**unstable**: for callers that make raw buffers or lose the device on
    /// purpose).
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// Pretends the device binds at most `bytes` per storage buffer (tests of the binding limit).
    #[cfg(feature = "test-support")]
    pub fn set_binding_limit(&mut self, bytes: u64) {
        self.limits.max_storage_buffer_binding_size = bytes;
    }

    /// Dispatches, passes, submissions, waits and bytes read back so far.
    pub fn counters(&self) -> Counters {
        self.counters.get()
    }

    fn count(&self, f: impl FnOnce(&mut Counters)) {
        let mut c = self.counters.get();
        f(&mut c);
        self.counters.set(c);
    }

    /// Starts timing every dispatch (up to `capacity`) with timestamp queries: each dispatch then
    /// gets a compute pass of its own, so the batch shape differs from normal runs (profiling
    /// only). Needs the adapter's `timestamp-query` feature.
    pub fn start_profile(&self, capacity: u32) -> Result<()> {
        if !self.caps.timestamps {
            return Err(Error::InvalidArgument(format!("{} has no timestamp queries", self.describe())));
        }
        let count = 2 * capacity.clamp(1, 2048);
        let set = self.device.create_query_set(&wgpu::QuerySetDescriptor { label: Some("profile"), ty: wgpu::QueryType::Timestamp, count });
        let resolve = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("profile resolve"),
            size: 8 * count as u64,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        *self.profiler.borrow_mut() = Some(Profiler { set, resolve, capacity: count / 2, labels: Vec::new() });
        Ok(())
    }

    /// Stops profiling and returns each timed dispatch's label (`file.entry`, its override
    /// constants and its workgroup counts) and GPU milliseconds, in recording order.
    pub async fn finish_profile(&self) -> Result<Vec<(String, f64)>> {
        let Some(p) = self.profiler.borrow_mut().take() else {
            return Err(Error::InvalidArgument("no profile was started".into()));
        };
        let n = p.labels.len() as u32;
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.resolve_query_set(&p.set, 0..2 * n, &p.resolve, 0);
        self.queue.submit([enc.finish()]);
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&self.read(&p.resolve, 16 * n as u64).await?);
        let period = self.queue.get_timestamp_period() as f64;
        Ok(p.labels.into_iter().zip(ticks.chunks_exact(2)).map(|(l, t)| (l, t[1].saturating_sub(t[0]) as f64 * period / 1e6)).collect())
    }

    /// Destroys the device now: its memory is freed at once, and every later call fails with
    /// [`Error::DeviceLost`].
    pub fn destroy(&self) {
        self.device.destroy();
    }

    /// `Err(DeviceLost)` once the device is gone, else any error raised outside an error scope.
    pub fn check_alive(&self) -> Result<()> {
        if let Some(msg) = self.lost.lock().ok().and_then(|l| l.clone()) {
            return Err(Error::DeviceLost(msg));
        }
        if let Some(msg) = self.uncaptured.lock().ok().and_then(|mut u| u.take()) {
            return Err(Error::Validation(msg));
        }
        Ok(())
    }

    /// Waits until all submitted work has finished (native: blocks; browser: awaits).
    pub async fn finish(&self) -> Result<()> {
        self.count(|c| c.waits += 1);
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| Error::Validation(e.to_string()))?;
        }
        #[cfg(target_arch = "wasm32")]
        {
            let (tx, rx) = futures_channel::oneshot::channel();
            self.queue.on_submitted_work_done(move || {
                let _ = tx.send(());
            });
            rx.await.map_err(|_| Error::DeviceLost("work-done callback dropped".into()))?;
        }
        self.check_alive()
    }

    /// Whether every pass submitted so far has finished, without waiting (native only: WebGPU
    /// has no such query).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn idle(&self) -> Result<bool> {
        let status = self.device.poll(wgpu::PollType::Poll).map_err(|e| Error::Validation(e.to_string()))?;
        Ok(status.is_queue_empty())
    }
}

/// Validation and out-of-memory error scopes around a piece of GPU work.
struct Scopes {
    // Declared inner scope first: fields drop in order, and scopes must pop innermost first.
    validation: wgpu::ErrorScopeGuard,
    oom: wgpu::ErrorScopeGuard,
}

impl Scopes {
    fn push(device: &wgpu::Device) -> Scopes {
        let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
        Scopes { validation, oom }
    }

    async fn pop(self, gpu: &Gpu) -> Result<()> {
        let (v, o) = (self.validation.pop(), self.oom.pop());
        let (v, o) = (v.await, o.await);
        gpu.check_alive()?;
        if let Some(e) = o {
            return Err(Error::OutOfMemory(e.to_string()));
        }
        match v {
            Some(wgpu::Error::Validation { description, .. }) => Err(Error::Validation(description)),
            Some(wgpu::Error::OutOfMemory { source }) => Err(Error::OutOfMemory(source.to_string())),
            Some(wgpu::Error::Internal { description, .. }) => Err(Error::GpuInternal(description)),
            None => Ok(()),
        }
    }
}

/// Wall-clock milliseconds (monotonic natively, `performance.now()` in the browser).
pub fn now_ms() -> f64 {
    #[cfg(not(target_arch = "wasm32"))]
    {
        use std::sync::OnceLock;
        static T0: OnceLock<std::time::Instant> = OnceLock::new();
        T0.get_or_init(std::time::Instant::now).elapsed().as_secs_f64() * 1e3
    }
    #[cfg(target_arch = "wasm32")]
    {
        use wasm_bindgen::JsCast;
        js_sys::Reflect::get(&js_sys::global(), &"performance".into())
            .ok()
            .and_then(|p| p.dyn_into::<web_sys::Performance>().ok())
            .map_or(0.0, |p| p.now())
    }
}
