//! The caches every dispatch goes through: shader modules by kernel, bind-group and pipeline
//! layouts by entry point, pipelines by (shader, entry point, override constants), bind groups by
//! buffer identity.

use super::{Gpu, MAX_PARAMS};

/// How a kernel binding is accessed. Binding 0 of every kernel is its uniform parameter block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// `var<storage, read>`.
    Read,
    /// `var<storage, read_write>`.
    ReadWrite,
}

/// A compute kernel: one `shaders/<op>.wgsl` file, one entry point, the storage bindings after
/// the parameter block, in order.
pub struct Kernel {
    /// The shader's name (`shaders/<name>.wgsl`): the shader-module cache key.
    pub name: &'static str,
    /// Its WGSL source.
    pub source: &'static str,
    /// The entry point.
    pub entry: &'static str,
    /// How bindings 1.. are accessed, in order.
    pub bindings: &'static [Access],
}

/// Pipeline cache key: shader, entry point and override constants (as f64 bit patterns).
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct PipelineKey {
    shader: &'static str,
    entry: &'static str,
    constants: Vec<(&'static str, u64)>,
}

/// Bind group cache key: the pipeline layout's kernel plus the identity and range of each buffer.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct BindKey {
    shader: &'static str,
    entry: &'static str,
    buffers: Vec<(wgpu::Buffer, u64, u64)>,
}

/// A kernel's bind group layout and the pipeline layout made of it.
pub(super) type Layouts = (wgpu::BindGroupLayout, wgpu::PipelineLayout);

impl Gpu {
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
                let bgl = self.device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some(k.name), entries: &entries });
                let pl = self.device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                    label: Some(k.name),
                    bind_group_layouts: &[Some(&bgl)],
                    immediate_size: 0,
                });
                (bgl, pl)
            })
            .clone()
    }

    pub(super) fn pipeline(&self, k: &Kernel, constants: &[(&'static str, f64)]) -> wgpu::ComputePipeline {
        let key = PipelineKey { shader: k.name, entry: k.entry, constants: constants.iter().map(|(n, v)| (*n, v.to_bits())).collect() };
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
            compilation_options: wgpu::PipelineCompilationOptions { constants, zero_initialize_workgroup_memory: false },
            cache: None,
        });
        self.pipelines.borrow_mut().insert(key, p.clone());
        p
    }

    pub(super) fn bind_group(&self, k: &Kernel, buffers: &[&wgpu::Buffer]) -> wgpu::BindGroup {
        let key = BindKey { shader: k.name, entry: k.entry, buffers: buffers.iter().map(|b| ((*b).clone(), 0, b.size())).collect() };
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
        let bg = self.device.create_bind_group(&wgpu::BindGroupDescriptor { label: Some(k.name), layout: &bgl, entries: &entries });
        self.bind_groups.borrow_mut().insert(key, bg.clone());
        bg
    }
}
