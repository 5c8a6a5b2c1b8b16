//! Spike: on lavapipe, does a matrix-vector product reading its weights through `textureLoad` of
//! an rgba32uint texture (16 bytes a lane a fetch) beat the same product reading a storage buffer
//! (4 bytes a lane a load)? Int8 weights, one f32 scale a 32-value block, K = 640, as Gemma-3's
//! Q8_0 head. Prints ms a dispatch for each and checks both give the same y.

use std::time::Instant;
use wgpu::util::DeviceExt;

const SRC: &str = r#"
struct P { n: u32, k: u32, tex_w: u32, pad: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<u32>;
@group(0) @binding(4) var<storage, read> d: array<f32>;
@group(0) @binding(5) var wt: texture_2d<u32>;

const G: u32 = 32u;

fn i8x4(q: u32) -> vec4<f32> {
    return vec4<f32>(vec4<i32>(bitcast<i32>(q << 24u) >> 24u, bitcast<i32>(q << 16u) >> 24u, bitcast<i32>(q << 8u) >> 24u, bitcast<i32>(q) >> 24u));
}

// Storage buffer: word j of row r at (r/G)·W·G + j·G + r%G. 4 rows an invocation.
@compute @workgroup_size(64)
fn buf(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n0 = (gid.x / G) * 4u * G + gid.x % G;
    if n0 >= p.n { return; }
    let wr = p.k / 4u;
    let b0 = (n0 / G) * wr * G + n0 % G;
    let b1 = ((n0 + G) / G) * wr * G + n0 % G;
    let b2 = ((n0 + 2u * G) / G) * wr * G + n0 % G;
    let b3 = ((n0 + 3u * G) / G) * wr * G + n0 % G;
    var a0 = 0.0; var a1 = 0.0; var a2 = 0.0; var a3 = 0.0;
    let nb = p.k / 32u;
    for (var c = 0u; c < nb; c++) {
        var s0 = vec4<f32>(0.0); var s1 = vec4<f32>(0.0); var s2 = vec4<f32>(0.0); var s3 = vec4<f32>(0.0);
        for (var i = 0u; i < 8u; i++) {
            let j = c * 8u + i;
            let xv = x[j];
            s0 += xv * i8x4(w[b0 + j * G]);
            s1 += xv * i8x4(w[b1 + j * G]);
            s2 += xv * i8x4(w[b2 + j * G]);
            s3 += xv * i8x4(w[b3 + j * G]);
        }
        a0 += d[(n0) * nb + c] * dot(s0, vec4<f32>(1.0));
        a1 += d[(n0 + G) * nb + c] * dot(s1, vec4<f32>(1.0));
        a2 += d[(n0 + 2u * G) * nb + c] * dot(s2, vec4<f32>(1.0));
        a3 += d[(n0 + 3u * G) * nb + c] * dot(s3, vec4<f32>(1.0));
    }
    y[n0] = a0; y[n0 + G] = a1; y[n0 + 2u * G] = a2; y[n0 + 3u * G] = a3;
}

fn tex_at(idx: u32) -> vec4<u32> {
    return textureLoad(wt, vec2<u32>(idx % p.tex_w, idx / p.tex_w), 0);
}

// Texture: texel t (words 4t..4t+3) of row r at linear index (r/G)·(W/4)·G + t·G + r%G.
@compute @workgroup_size(64)
fn tex(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n0 = (gid.x / G) * 4u * G + gid.x % G;
    if n0 >= p.n { return; }
    let tr = p.k / 16u;
    let b0 = (n0 / G) * tr * G + n0 % G;
    let b1 = ((n0 + G) / G) * tr * G + n0 % G;
    let b2 = ((n0 + 2u * G) / G) * tr * G + n0 % G;
    let b3 = ((n0 + 3u * G) / G) * tr * G + n0 % G;
    var a0 = 0.0; var a1 = 0.0; var a2 = 0.0; var a3 = 0.0;
    let nb = p.k / 32u;
    for (var c = 0u; c < nb; c++) {
        var s0 = vec4<f32>(0.0); var s1 = vec4<f32>(0.0); var s2 = vec4<f32>(0.0); var s3 = vec4<f32>(0.0);
        for (var i = 0u; i < 2u; i++) {
            let t = c * 2u + i;
            let x0 = x[4u * t]; let x1 = x[4u * t + 1u]; let x2 = x[4u * t + 2u]; let x3 = x[4u * t + 3u];
            let q0 = tex_at(b0 + t * G);
            let q1 = tex_at(b1 + t * G);
            let q2 = tex_at(b2 + t * G);
            let q3 = tex_at(b3 + t * G);
            s0 += x0 * i8x4(q0.x) + x1 * i8x4(q0.y) + x2 * i8x4(q0.z) + x3 * i8x4(q0.w);
            s1 += x0 * i8x4(q1.x) + x1 * i8x4(q1.y) + x2 * i8x4(q1.z) + x3 * i8x4(q1.w);
            s2 += x0 * i8x4(q2.x) + x1 * i8x4(q2.y) + x2 * i8x4(q2.z) + x3 * i8x4(q2.w);
            s3 += x0 * i8x4(q3.x) + x1 * i8x4(q3.y) + x2 * i8x4(q3.z) + x3 * i8x4(q3.w);
        }
        a0 += d[(n0) * nb + c] * dot(s0, vec4<f32>(1.0));
        a1 += d[(n0 + G) * nb + c] * dot(s1, vec4<f32>(1.0));
        a2 += d[(n0 + 2u * G) * nb + c] * dot(s2, vec4<f32>(1.0));
        a3 += d[(n0 + 3u * G) * nb + c] * dot(s3, vec4<f32>(1.0));
    }
    y[n0] = a0; y[n0 + G] = a1; y[n0 + 2u * G] = a2; y[n0 + 3u * G] = a3;
}
"#;

fn main() {
    pollster::block_on(run());
}

async fn run() {
    let n: u32 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(131072);
    let k: u32 = 640;
    let reps = 6;
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = wgpu::Backends::VULKAN;
    let instance = wgpu::Instance::new(desc);
    let adapter = instance
        .request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
            compatible_surface: None,
            apply_limit_buckets: false,
        })
        .await
        .expect("adapter");
    println!("{:?}", adapter.get_info());
    let (device, queue) = adapter
        .request_device(&wgpu::DeviceDescriptor {
            label: None,
            required_features: wgpu::Features::empty(),
            required_limits: adapter.limits(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        })
        .await
        .expect("device");
    // Weights: row-major words w0[r][j], then the two layouts.
    let wr = (k / 4) as usize;
    let mut seed = 12345u64;
    let mut rnd = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed as u32
    };
    let rows: Vec<u32> = (0..n as usize * wr).map(|_| rnd()).collect();
    let g = 32usize;
    let mut buf_words = vec![0u32; rows.len()];
    for r in 0..n as usize {
        for j in 0..wr {
            buf_words[(r / g) * wr * g + j * g + r % g] = rows[r * wr + j];
        }
    }
    let tr = wr / 4;
    let tex_w = 8192usize;
    let texels = n as usize * tr;
    let tex_h = texels.div_ceil(tex_w);
    let mut tex_words = vec![0u32; tex_w * tex_h * 4];
    for r in 0..n as usize {
        for t in 0..tr {
            let idx = (r / g) * tr * g + t * g + r % g;
            tex_words[idx * 4..idx * 4 + 4].copy_from_slice(&rows[r * wr + 4 * t..r * wr + 4 * t + 4]);
        }
    }
    let nb = (k / 32) as usize;
    let d: Vec<f32> = (0..n as usize * nb).map(|i| 1.0 / (1.0 + (i % 7) as f32)).collect();
    let x: Vec<f32> = (0..k as usize).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
    let storage = |c: &[u8], label| {
        device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: Some(label), contents: c, usage: wgpu::BufferUsages::STORAGE })
    };
    let p = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: None,
        contents: bytemuck::cast_slice(&[n, k, tex_w as u32, 0]),
        usage: wgpu::BufferUsages::UNIFORM,
    });
    let xb = storage(bytemuck::cast_slice(&x), "x");
    let wb = storage(bytemuck::cast_slice(&buf_words), "w");
    let db = storage(bytemuck::cast_slice(&d), "d");
    let yb = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: n as u64 * 4,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let read = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: n as u64 * 4,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let size = wgpu::Extent3d { width: tex_w as u32, height: tex_h as u32, depth_or_array_layers: 1 };
    let tex = device.create_texture(&wgpu::TextureDescriptor {
        label: None,
        size,
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: wgpu::TextureFormat::Rgba32Uint,
        usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
        view_formats: &[],
    });
    queue.write_texture(
        wgpu::TexelCopyTextureInfo { texture: &tex, mip_level: 0, origin: wgpu::Origin3d::ZERO, aspect: wgpu::TextureAspect::All },
        bytemuck::cast_slice(&tex_words),
        wgpu::TexelCopyBufferLayout { offset: 0, bytes_per_row: Some(tex_w as u32 * 16), rows_per_image: Some(tex_h as u32) },
        size,
    );
    let view = tex.create_view(&wgpu::TextureViewDescriptor::default());
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor { label: None, source: wgpu::ShaderSource::Wgsl(SRC.into()) });
    let mut results = Vec::new();
    for entry in ["buf", "tex", "buf", "tex"] {
        let pipe = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: None,
            module: &module,
            entry_point: Some(entry),
            compilation_options: Default::default(),
            cache: None,
        });
        let mut entries = vec![
            wgpu::BindGroupEntry { binding: 0, resource: p.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 1, resource: xb.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 2, resource: yb.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 4, resource: db.as_entire_binding() },
        ];
        if entry == "buf" {
            entries.push(wgpu::BindGroupEntry { binding: 3, resource: wb.as_entire_binding() });
        } else {
            entries.push(wgpu::BindGroupEntry { binding: 5, resource: wgpu::BindingResource::TextureView(&view) });
        }
        let bg =
            device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &pipe.get_bind_group_layout(0), entries: &entries });
        let invocations = n / 4;
        let mut times = Vec::new();
        for rep in 0..reps {
            let mut enc = device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipe);
                pass.set_bind_group(0, &bg, &[]);
                pass.dispatch_workgroups(invocations.div_ceil(64), 1, 1);
            }
            if rep == reps - 1 {
                enc.copy_buffer_to_buffer(&yb, 0, &read, 0, n as u64 * 4);
            }
            let t = Instant::now();
            queue.submit([enc.finish()]);
            device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        read.slice(..).map_async(wgpu::MapMode::Read, |_| {});
        device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
        let y: Vec<f32> = bytemuck::cast_slice(&read.slice(..).get_mapped_range().expect("map")).to_vec();
        read.unmap();
        times.sort_by(f64::total_cmp);
        println!("{entry}: median {:.2} ms, min {:.2} ms ({:?})", times[reps / 2], times[0], &times);
        results.push(y);
    }
    let diff = results[0].iter().zip(&results[1]).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    println!("max |y_buf - y_tex| = {diff}");
}
