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

/// Optional adapter features in use. Everything works with all of them off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    /// Timestamp queries: `Gpu::start_profile` (benchmarks) needs them.
    pub timestamps: bool,
    /// The subgroup size, when the device has subgroup operations (natively) and the adapter's
    /// subgroups have one fixed size: `Kind::Lanes` attention needs it.
    pub subgroup_size: Option<u32>,
}

/// How a kernel binding is accessed. Binding 0 of every kernel is its uniform parameter block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "test-support", visibility::make(pub))]
pub(crate) enum Access {
    Read,
    ReadWrite,
}

/// A compute kernel: one `shaders/<op>.wgsl` file, one entry point, the storage bindings after
/// the parameter block, in order.
#[cfg_attr(feature = "test-support", visibility::make(pub))]
pub(crate) struct Kernel {
    pub name: &'static str,
    pub source: &'static str,
    pub entry: &'static str,
    pub bindings: &'static [Access],
}

/// Pipeline cache key: shader, entry point and override constants (as f64 bit patterns).
#[derive(Clone, PartialEq, Eq, Hash)]
struct PipelineKey {
    shader: &'static str,
    entry: &'static str,
    constants: Vec<(&'static str, u64)>,
}

/// Bind group cache key: the pipeline layout's kernel plus the identity and range of each buffer.
#[derive(Clone, PartialEq, Eq, Hash)]
struct BindKey {
    shader: &'static str,
    entry: &'static str,
    buffers: Vec<(wgpu::Buffer, u64, u64)>,
}

/// Parameter slots in the arena; a batch with more dispatches submits in parts.
const PARAM_SLOTS: u64 = 4096;
/// Largest parameter block a kernel may use, in bytes.
#[cfg_attr(feature = "test-support", visibility::make(pub))]
pub(crate) const MAX_PARAMS: usize = 64;

/// A kernel's bind group layout and the pipeline layout made of it.
type Layouts = (wgpu::BindGroupLayout, wgpu::PipelineLayout);

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
        // Subgroup operations only natively: browsers need `enable subgroups;`, which naga rejects.
        #[cfg(not(target_arch = "wasm32"))]
        let wanted = wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::SUBGROUP;
        #[cfg(target_arch = "wasm32")]
        let wanted = wgpu::Features::TIMESTAMP_QUERY;
        let features = offered & wanted;
        let limits = adapter.limits();
        // What the kernels need: attention binds 8 storage buffers (WebGPU's default limit),
        // argmax and matvec_coop use 256-wide workgroups.
        if limits.max_storage_buffers_per_shader_stage < 8 || limits.max_compute_invocations_per_workgroup < 256 || limits.max_compute_workgroup_size_x < 256 {
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
            "{} ({:?} {:?}, driver {} {}; timestamps={}; subgroups={}; max binding {} MiB)",
            name,
            self.info.device_type,
            self.info.backend,
            self.info.driver,
            self.info.driver_info,
            self.caps.timestamps,
            self.caps.subgroup_size.map_or("no".to_string(), |n| n.to_string()),
            self.limits.max_storage_buffer_binding_size >> 20
        )
    }

    /// The adapter: name, backend, device type, driver.
    pub fn info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    /// The device's limits (the adapter's own, as requested).
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }

    /// The optional features in use.
    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// The wgpu device (tests that make raw buffers or lose the device on purpose).
    #[cfg(feature = "test-support")]
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

    /// Creates a storage buffer (inside error scopes, so out-of-memory is a typed error).
    #[cfg_attr(feature = "test-support", visibility::make(pub))]
    pub(crate) async fn storage(&self, label: &str, bytes: u64) -> Result<wgpu::Buffer> {
        self.check_binding(label, bytes)?;
        let scopes = Scopes::push(&self.device);
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.max(4).next_multiple_of(4),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        scopes.pop(self).await?;
        Ok(buf)
    }

    /// Creates a storage buffer holding `data`.
    #[cfg_attr(feature = "test-support", visibility::make(pub))]
    pub(crate) async fn upload<T: bytemuck::Pod>(&self, label: &str, data: &[T]) -> Result<wgpu::Buffer> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let buf = self.storage(label, bytes.len() as u64).await?;
        self.write(&buf, 0, data);
        Ok(buf)
    }

    /// Queues a write of `data` at byte `offset` (applied before the next submission runs).
    #[cfg_attr(feature = "test-support", visibility::make(pub))]
    pub(crate) fn write<T: bytemuck::Pod>(&self, buf: &wgpu::Buffer, offset: u64, data: &[T]) {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        if bytes.len().is_multiple_of(4) {
            self.queue.write_buffer(buf, offset, bytes);
        } else {
            let mut padded = bytes.to_vec();
            padded.resize(bytes.len().next_multiple_of(4), 0);
            self.queue.write_buffer(buf, offset, &padded);
        }
    }

    fn check_binding(&self, what: &str, bytes: u64) -> Result<()> {
        let limit = self.limits.max_storage_buffer_binding_size.min(self.limits.max_buffer_size);
        if bytes > limit {
            return Err(Error::TooLarge { what: what.to_string(), bytes, limit });
        }
        Ok(())
    }

    /// Copies `bytes` bytes from the start of `buf` back to the CPU.
    #[cfg_attr(feature = "test-support", visibility::make(pub))]
    pub(crate) async fn read(&self, buf: &wgpu::Buffer, bytes: u64) -> Result<Vec<u8>> {
        self.read_ranges(buf, &[(0, bytes)]).await
    }

    /// Copies the byte ranges `(offset, length)` of `buf` back to the CPU, concatenated, in one
    /// submission and one map (e.g. scattered KV pages). With several ranges, every offset and
    /// length must be a multiple of 4.
    #[cfg_attr(feature = "test-support", visibility::make(pub))]
    pub(crate) async fn read_ranges(&self, buf: &wgpu::Buffer, ranges: &[(u64, u64)]) -> Result<Vec<u8>> {
        if ranges.len() > 1 && ranges.iter().any(|&(o, n)| o % 4 != 0 || n % 4 != 0) {
            return Err(Error::InvalidArgument(format!("readback ranges must be 4-byte aligned: {ranges:?}")));
        }
        let bytes: u64 = ranges.iter().map(|&(_, n)| n).sum();
        if bytes == 0 {
            return Ok(Vec::new());
        }
        let size = bytes.next_multiple_of(4);
        let staging = {
            let mut slot = self.staging.borrow_mut();
            match slot.as_ref() {
                Some(s) if s.size() >= size => s.clone(),
                _ => {
                    let s = self.device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("readback"),
                        size: size.next_power_of_two().max(1024),
                        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                        mapped_at_creation: false,
                    });
                    *slot = Some(s.clone());
                    s
                }
            }
        };
        let scopes = Scopes::push(&self.device);
        let mut enc = self.device.create_command_encoder(&Default::default());
        let mut at = 0;
        for &(offset, n) in ranges {
            enc.copy_buffer_to_buffer(buf, offset, &staging, at, n.next_multiple_of(4));
            at += n.next_multiple_of(4);
        }
        self.queue.submit([enc.finish()]);
        self.count(|c| {
            c.submits += 1;
            c.waits += 1;
            c.read_bytes += bytes;
        });
        let (tx, rx) = futures_channel::oneshot::channel();
        staging.map_async(wgpu::MapMode::Read, 0..size, move |r| {
            let _ = tx.send(r);
        });
        let out = self.finish_read(&staging, rx, scopes, bytes, size).await;
        if out.is_err() {
            // A staging buffer left mapped or pending would fail every later read: drop it.
            staging.unmap();
            *self.staging.borrow_mut() = None;
        }
        out
    }

    async fn finish_read(
        &self,
        staging: &wgpu::Buffer,
        rx: futures_channel::oneshot::Receiver<Result<(), wgpu::BufferAsyncError>>,
        scopes: Scopes,
        bytes: u64,
        size: u64,
    ) -> Result<Vec<u8>> {
        scopes.pop(self).await?;
        #[cfg(not(target_arch = "wasm32"))]
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Readback(e.to_string()))?;
        let mapped = rx.await.map_err(|_| Error::Readback("map callback dropped".into()))?;
        if let Err(e) = mapped {
            self.check_alive()?;
            return Err(Error::Readback(e.to_string()));
        }
        let out = {
            let view = staging.get_mapped_range(0..size).map_err(|e| Error::Readback(e.to_string()))?;
            view[..bytes as usize].to_vec()
        };
        staging.unmap();
        Ok(out)
    }

    /// Reads back `n` f32 values.
    #[cfg_attr(feature = "test-support", visibility::make(pub))]
    pub(crate) async fn read_f32(&self, buf: &wgpu::Buffer, n: usize) -> Result<Vec<f32>> {
        let b = self.read(buf, 4 * n as u64).await?;
        Ok(bytemuck::pod_collect_to_vec(&b))
    }

    /// Reads back `n` u32 values.
    #[cfg_attr(feature = "test-support", visibility::make(pub))]
    pub(crate) async fn read_u32(&self, buf: &wgpu::Buffer, n: usize) -> Result<Vec<u32>> {
        let b = self.read(buf, 4 * n as u64).await?;
        Ok(bytemuck::pod_collect_to_vec(&b))
    }

    /// Waits until all submitted work has finished (native: blocks; browser: awaits).
    pub async fn finish(&self) -> Result<()> {
        self.count(|c| c.waits += 1);
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| Error::Validation(e.to_string()))?;
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

    /// Starts recording a batch of dispatches. One batch records at a time.
    #[cfg_attr(feature = "test-support", visibility::make(pub))]
    pub(crate) fn batch(&self) -> Result<Batch<'_>> {
        self.check_alive()?;
        if self.batch_open.replace(true) {
            return Err(Error::Validation("a batch is already being recorded on this Gpu".into()));
        }
        Ok(Batch {
            gpu: self,
            enc: None,
            pass: None,
            slot: 0,
            params: Vec::new(),
            scopes: Some(Scopes::push(&self.device)),
            pending: Vec::new(),
        })
    }

    fn module(&self, k: &Kernel) -> wgpu::ShaderModule {
        self.modules
            .borrow_mut()
            .entry(k.name)
            .or_insert_with(|| {
                self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(k.name),
                    source: wgpu::ShaderSource::Wgsl(k.source.into()),
                })
            })
            .clone()
    }

    fn layout(&self, k: &Kernel) -> (wgpu::BindGroupLayout, wgpu::PipelineLayout) {
        self.layouts
            .borrow_mut()
            .entry((k.name, k.entry))
            .or_insert_with(|| {
                let mut entries = vec![wgpu::BindGroupLayoutEntry {
                    binding: 0,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: true,
                        min_binding_size: None,
                    },
                    count: None,
                }];
                for (i, a) in k.bindings.iter().enumerate() {
                    entries.push(wgpu::BindGroupLayoutEntry {
                        binding: i as u32 + 1,
                        visibility: wgpu::ShaderStages::COMPUTE,
                        ty: wgpu::BindingType::Buffer {
                            ty: wgpu::BufferBindingType::Storage { read_only: *a == Access::Read },
                            has_dynamic_offset: false,
                            min_binding_size: None,
                        },
                        count: None,
                    });
                }
                let bgl = self.device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some(k.name),
                    entries: &entries,
                });
                let pl = self.device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                    label: Some(k.name),
                    bind_group_layouts: &[Some(&bgl)],
                    immediate_size: 0,
                });
                (bgl, pl)
            })
            .clone()
    }

    fn pipeline(&self, k: &Kernel, constants: &[(&'static str, f64)]) -> wgpu::ComputePipeline {
        let key = PipelineKey {
            shader: k.name,
            entry: k.entry,
            constants: constants.iter().map(|(n, v)| (*n, v.to_bits())).collect(),
        };
        if let Some(p) = self.pipelines.borrow().get(&key) {
            return p.clone();
        }
        let module = self.module(k);
        let (_, layout) = self.layout(k);
        let p = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(k.entry),
            layout: Some(&layout),
            module: &module,
            entry_point: Some(k.entry),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants,
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        });
        self.pipelines.borrow_mut().insert(key, p.clone());
        p
    }

    fn bind_group(&self, k: &Kernel, buffers: &[&wgpu::Buffer]) -> wgpu::BindGroup {
        let key = BindKey {
            shader: k.name,
            entry: k.entry,
            buffers: buffers.iter().map(|b| ((*b).clone(), 0, b.size())).collect(),
        };
        if let Some(bg) = self.bind_groups.borrow().get(&key) {
            return bg.clone();
        }
        let (bgl, _) = self.layout(k);
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &self.params,
                offset: 0,
                size: wgpu::BufferSize::new(MAX_PARAMS as u64),
            }),
        }];
        for (i, b) in buffers.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry { binding: i as u32 + 1, resource: b.as_entire_binding() });
        }
        let bg = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(k.name),
            layout: &bgl,
            entries: &entries,
        });
        self.bind_groups.borrow_mut().insert(key, bg.clone());
        bg
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

/// A batch of recorded dispatches, submitted together: one compute pass (broken only by a
/// buffer copy), and one upload of every dispatch's parameter block at submission. When the
/// arena's slots run out the batch submits what it has and goes on.
#[cfg_attr(feature = "test-support", visibility::make(pub))]
pub(crate) struct Batch<'g> {
    /// The open compute pass (its encoder borrow released with `forget_lifetime`; it is always
    /// ended before `enc` is used again, and dropped before it: fields drop in order).
    pass: Option<wgpu::ComputePass<'static>>,
    gpu: &'g Gpu,
    enc: Option<wgpu::CommandEncoder>,
    slot: u64,
    /// Parameter blocks of the dispatches recorded since the last upload, `param_slot` apart.
    params: Vec<u8>,
    scopes: Option<Scopes>,
    pending: Vec<wgpu::CommandBuffer>,
}

impl<'g> Batch<'g> {
    #[cfg_attr(feature = "test-support", visibility::make(pub))]
    pub(crate) fn gpu(&self) -> &'g Gpu {
        self.gpu
    }

    /// Records one dispatch of `kernel` with `params` (at most `MAX_PARAMS` bytes) over
    /// `buffers` (bindings 1..), with override `constants`.
    #[cfg_attr(feature = "test-support", visibility::make(pub))]
    pub(crate) fn dispatch(
        &mut self,
        kernel: &Kernel,
        constants: &[(&'static str, f64)],
        params: &[u32],
        buffers: &[&wgpu::Buffer],
        groups: [u32; 3],
    ) -> Result<()> {
        if buffers.len() != kernel.bindings.len() {
            return Err(Error::shape(kernel.name, format!("{} buffers for {} bindings", buffers.len(), kernel.bindings.len())));
        }
        if params.len() * 4 > MAX_PARAMS {
            return Err(Error::shape(kernel.name, "parameter block too large"));
        }
        let max = self.gpu.limits.max_compute_workgroups_per_dimension;
        if groups.iter().any(|&g| g > max) {
            return Err(Error::TooLarge {
                what: format!("{} dispatch {groups:?} workgroups", kernel.name),
                bytes: groups.iter().copied().max().unwrap_or(0) as u64,
                limit: max as u64,
            });
        }
        if groups.contains(&0) {
            return Ok(());
        }
        if self.slot == PARAM_SLOTS {
            self.flush();
        }
        let offset = self.slot * self.gpu.param_slot;
        self.slot += 1;
        self.params.resize(offset as usize, 0);
        self.params.extend_from_slice(bytemuck::cast_slice(params));
        let pipeline = self.gpu.pipeline(kernel, constants);
        let bg = self.gpu.bind_group(kernel, buffers);
        // Profiling: this dispatch in a pass of its own, timed by its begin and end timestamps.
        let mut prof = self.gpu.profiler.borrow_mut();
        let timed = prof.as_mut().filter(|p| (p.labels.len() as u32) < p.capacity).map(|p| {
            let i = p.labels.len() as u32;
            let consts: Vec<String> = constants.iter().map(|(k, v)| format!("{k}={v}")).collect();
            p.labels.push(format!("{}.{} {} {groups:?}", kernel.name, kernel.entry, consts.join(",")));
            wgpu::ComputePassTimestampWrites { query_set: &p.set, beginning_of_pass_write_index: Some(2 * i), end_of_pass_write_index: Some(2 * i + 1) }
        });
        if timed.is_some() {
            self.pass = None;
        }
        let pass = match &mut self.pass {
            Some(p) => p,
            None => {
                let enc = self.enc.get_or_insert_with(|| self.gpu.device.create_command_encoder(&Default::default()));
                let pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("hotprefix"), timestamp_writes: timed.clone() }).forget_lifetime();
                self.gpu.count(|c| c.passes += 1);
                self.pass.insert(pass)
            }
        };
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bg, &[offset as u32]);
        pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
        if timed.is_some() {
            self.pass = None;
        }
        self.gpu.count(|c| c.dispatches += 1);
        Ok(())
    }

    /// Uploads the recorded parameters and submits the recorded work (also when the param arena
    /// is full; later writes to the arena are ordered after this submission by the queue).
    fn flush(&mut self) {
        self.pass = None;
        if !self.params.is_empty() {
            self.gpu.queue.write_buffer(&self.gpu.params, 0, &self.params);
            self.params.clear();
        }
        if let Some(enc) = self.enc.take() {
            self.pending.push(enc.finish());
        }
        if !self.pending.is_empty() {
            self.gpu.queue.submit(self.pending.drain(..));
            self.gpu.count(|c| c.submits += 1);
        }
        self.slot = 0;
    }

    /// Submits everything and reports any GPU error raised while recording or submitting.
    #[cfg_attr(feature = "test-support", visibility::make(pub))]
    pub(crate) async fn submit(mut self) -> Result<()> {
        self.flush();
        // `batch_open` is cleared when `self` drops, after the scopes are popped.
        let scopes = self.scopes.take();
        match scopes {
            Some(s) => s.pop(self.gpu).await,
            None => Ok(()),
        }
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        self.gpu.batch_open.set(false);
    }
}
