//! Spike: on lavapipe, how fast can a matrix-vector product read its weights? Int8 weights, one
//! f32 scale a 32-value block, K = 640, as Gemma-3's Q8_0 head; 4 rows an invocation. Variants:
//!
//! - `buf`: a storage buffer, one word a lane a load (rows interleaved by 32, as the engine's
//!   layout); `tex`: an rgba32uint texture, 4 words of a row a lane a fetch.
//! - `uni`: the buffer loaded at addresses made of workgroup_id and loop counters, each lane
//!   selecting its row's word (a test of whether lavapipe takes them as uniform loads).
//! - `buflanes`, `texlanes`: `buf` and `tex` with x shared by subgroup broadcast, as the engine's
//!   `matvec_lanes` shares it; `v4lanes`: `texlanes`' texels in a storage buffer of vec4<u32>;
//!   `r32lanes`: `buflanes` reading each word through an r32uint texture; `u64lanes`: `buflanes`
//!   loading two words a lane a load as one u64 (SHADER_INT64, so native adapters only);
//!   `dotlanes`: `buflanes` on x quantized to i8 beforehand (Q8_0-style, a scale a 32-value
//!   block), each weight word multiplied by `dot4I8Packed` (its y differs from `buf`'s by that
//!   quantization: printed beside the largest |y|); `dotarr4`, `dotarr8`: `dotlanes` shaped as
//!   the engine's `matvec_lanes` (4 or 8 rows an invocation, row bases and sums in arrays walked
//!   by loops); `dotf16`: `dotlanes` with the scales as f16 pairs (as the engine's row headers).
//!
//! Prints ms a dispatch for each (two rounds) and checks every variant gives `buf`'s y. Figures
//! and conclusions: docs/BENCHMARKS.md, "Tried on 2026-12-02" and "Tried on 2026-12-03".

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
// Subgroup-uniform loads: lavapipe 25.0 turns a storage load whose address differs across the 8
// lanes of its vector into a loop over the lanes (a branch and a stack round trip each), but a
// load whose address NIR proves uniform into one scalar load, broadcast. Here each workgroup is
// one vector of 8 lanes taking 8 neighbouring rows; it loads the 8 words those rows need at
// addresses made only of workgroup_id and loop counters (uniform), and each lane selects its own.
fn pick(a: u32, l: u32) -> u32 {
    let lo = vec4<u32>(w[a], w[a + 1u], w[a + 2u], w[a + 3u]);
    let hi = vec4<u32>(w[a + 4u], w[a + 5u], w[a + 6u], w[a + 7u]);
    return select(lo, hi, l >= 4u)[l & 3u];
}

fn pickf(a: u32, s: u32, l: u32) -> f32 {
    let lo = vec4<f32>(d[a], d[a + s], d[a + 2u * s], d[a + 3u * s]);
    let hi = vec4<f32>(d[a + 4u * s], d[a + 5u * s], d[a + 6u * s], d[a + 7u * s]);
    return select(lo, hi, l >= 4u)[l & 3u];
}

@compute @workgroup_size(8)
fn uni(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let g0 = wid.x * 8u;
    let r0 = (g0 / G) * 4u * G + g0 % G;
    let l = lid.x;
    let wr = p.k / 4u;
    let b0 = (r0 / G) * wr * G + r0 % G;
    let b1 = b0 + wr * G;
    let b2 = b1 + wr * G;
    let b3 = b2 + wr * G;
    var a0 = 0.0; var a1 = 0.0; var a2 = 0.0; var a3 = 0.0;
    let nb = p.k / 32u;
    for (var c = 0u; c < nb; c++) {
        var s0 = vec4<f32>(0.0); var s1 = vec4<f32>(0.0); var s2 = vec4<f32>(0.0); var s3 = vec4<f32>(0.0);
        for (var i = 0u; i < 8u; i++) {
            let j = c * 8u + i;
            let xv = x[j];
            s0 += xv * i8x4(pick(b0 + j * G, l));
            s1 += xv * i8x4(pick(b1 + j * G, l));
            s2 += xv * i8x4(pick(b2 + j * G, l));
            s3 += xv * i8x4(pick(b3 + j * G, l));
        }
        a0 += pickf(r0 * nb + c, nb, l) * dot(s0, vec4<f32>(1.0));
        a1 += pickf((r0 + G) * nb + c, nb, l) * dot(s1, vec4<f32>(1.0));
        a2 += pickf((r0 + 2u * G) * nb + c, nb, l) * dot(s2, vec4<f32>(1.0));
        a3 += pickf((r0 + 3u * G) * nb + c, nb, l) * dot(s3, vec4<f32>(1.0));
    }
    let n0 = r0 + l;
    y[n0] = a0; y[n0 + G] = a1; y[n0 + 2u * G] = a2; y[n0 + 3u * G] = a3;
}
// As `buf` and `tex`, with x shared as matvec_lanes shares it: lane l of 8 loads quad l of a
// 32-value chunk once and subgroupBroadcast hands the 8 quads to every lane.
// Word 0 of rows n0 + iG, rows of `words` words interleaved by G.
fn bases4(n0: u32, words: u32) -> vec4<u32> {
    let b0 = (n0 / G) * words * G + n0 % G;
    return vec4<u32>(b0, b0 + words * G, b0 + 2u * words * G, b0 + 3u * words * G);
}

// The 4 rows' block-c sums, each scaled by its row's d (rows n0 + iG).
fn scaled4(n0: u32, c: u32, nb: u32, s0: vec4<f32>, s1: vec4<f32>, s2: vec4<f32>, s3: vec4<f32>) -> vec4<f32> {
    let one = vec4<f32>(1.0);
    return vec4<f32>(d[n0 * nb + c] * dot(s0, one), d[(n0 + G) * nb + c] * dot(s1, one), d[(n0 + 2u * G) * nb + c] * dot(s2, one),
        d[(n0 + 3u * G) * nb + c] * dot(s3, one));
}

// y of rows n0 + iG.
fn store4(n0: u32, a: vec4<f32>) {
    if n0 < p.n { y[n0] = a.x; y[n0 + G] = a.y; y[n0 + 2u * G] = a.z; y[n0 + 3u * G] = a.w; }
}

fn xq(c: u32, l: u32) -> array<vec4<f32>, 8> {
    let own = x[c * 8u + l % 8u];
    return array<vec4<f32>, 8>(subgroupBroadcast(own, 0u), subgroupBroadcast(own, 1u), subgroupBroadcast(own, 2u), subgroupBroadcast(own, 3u),
        subgroupBroadcast(own, 4u), subgroupBroadcast(own, 5u), subgroupBroadcast(own, 6u), subgroupBroadcast(own, 7u));
}

@compute @workgroup_size(64)
fn buflanes(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {
    let n0 = (gid.x / G) * 4u * G + gid.x % G;
    let wr = p.k / 4u;
    let b = bases4(n0, wr);
    var a = vec4<f32>(0.0);
    let nb = p.k / 32u;
    for (var c = 0u; c < nb; c++) {
        var xv = xq(c, sl);
        var s0 = vec4<f32>(0.0); var s1 = vec4<f32>(0.0); var s2 = vec4<f32>(0.0); var s3 = vec4<f32>(0.0);
        for (var i = 0u; i < 8u; i++) {
            let j = c * 8u + i;
            s0 += xv[i] * i8x4(w[b.x + j * G]);
            s1 += xv[i] * i8x4(w[b.y + j * G]);
            s2 += xv[i] * i8x4(w[b.z + j * G]);
            s3 += xv[i] * i8x4(w[b.w + j * G]);
        }
        a += scaled4(n0, c, nb, s0, s1, s2, s3);
    }
    store4(n0, a);
}

@compute @workgroup_size(64)
fn texlanes(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {
    let n0 = (gid.x / G) * 4u * G + gid.x % G;
    let tr = p.k / 16u;
    let b = bases4(n0, tr);
    var a = vec4<f32>(0.0);
    let nb = p.k / 32u;
    for (var c = 0u; c < nb; c++) {
        var xv = xq(c, sl);
        var s0 = vec4<f32>(0.0); var s1 = vec4<f32>(0.0); var s2 = vec4<f32>(0.0); var s3 = vec4<f32>(0.0);
        for (var i = 0u; i < 2u; i++) {
            let t = c * 2u + i;
            let x0 = xv[4u * i]; let x1 = xv[4u * i + 1u]; let x2 = xv[4u * i + 2u]; let x3 = xv[4u * i + 3u];
            let q0 = tex_at(b.x + t * G);
            let q1 = tex_at(b.y + t * G);
            let q2 = tex_at(b.z + t * G);
            let q3 = tex_at(b.w + t * G);
            s0 += x0 * i8x4(q0.x) + x1 * i8x4(q0.y) + x2 * i8x4(q0.z) + x3 * i8x4(q0.w);
            s1 += x0 * i8x4(q1.x) + x1 * i8x4(q1.y) + x2 * i8x4(q1.z) + x3 * i8x4(q1.w);
            s2 += x0 * i8x4(q2.x) + x1 * i8x4(q2.y) + x2 * i8x4(q2.z) + x3 * i8x4(q2.w);
            s3 += x0 * i8x4(q3.x) + x1 * i8x4(q3.y) + x2 * i8x4(q3.z) + x3 * i8x4(q3.w);
        }
        a += scaled4(n0, c, nb, s0, s1, s2, s3);
    }
    store4(n0, a);
}
// texlanes with the texels in a storage buffer of vec4<u32>: one load a lane of 16 bytes.
@group(0) @binding(6) var<storage, read> w4: array<vec4<u32>>;

@compute @workgroup_size(64)
fn v4lanes(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {
    let n0 = (gid.x / G) * 4u * G + gid.x % G;
    let tr = p.k / 16u;
    let b = bases4(n0, tr);
    var a = vec4<f32>(0.0);
    let nb = p.k / 32u;
    for (var c = 0u; c < nb; c++) {
        var xv = xq(c, sl);
        var s0 = vec4<f32>(0.0); var s1 = vec4<f32>(0.0); var s2 = vec4<f32>(0.0); var s3 = vec4<f32>(0.0);
        for (var i = 0u; i < 2u; i++) {
            let t = c * 2u + i;
            let x0 = xv[4u * i]; let x1 = xv[4u * i + 1u]; let x2 = xv[4u * i + 2u]; let x3 = xv[4u * i + 3u];
            let q0 = w4[b.x + t * G];
            let q1 = w4[b.y + t * G];
            let q2 = w4[b.z + t * G];
            let q3 = w4[b.w + t * G];
            s0 += x0 * i8x4(q0.x) + x1 * i8x4(q0.y) + x2 * i8x4(q0.z) + x3 * i8x4(q0.w);
            s1 += x0 * i8x4(q1.x) + x1 * i8x4(q1.y) + x2 * i8x4(q1.z) + x3 * i8x4(q1.w);
            s2 += x0 * i8x4(q2.x) + x1 * i8x4(q2.y) + x2 * i8x4(q2.z) + x3 * i8x4(q2.w);
            s3 += x0 * i8x4(q3.x) + x1 * i8x4(q3.y) + x2 * i8x4(q3.z) + x3 * i8x4(q3.w);
        }
        a += scaled4(n0, c, nb, s0, s1, s2, s3);
    }
    store4(n0, a);
}
// buflanes reading each word through an r32uint texture 8192 words wide (the buffer's layout).
@group(0) @binding(7) var wr32: texture_2d<u32>;

fn wt32(i: u32) -> u32 {
    return textureLoad(wr32, vec2<u32>(i & 8191u, i >> 13u), 0).x;
}

@compute @workgroup_size(64)
fn r32lanes(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {
    let n0 = (gid.x / G) * 4u * G + gid.x % G;
    let wr = p.k / 4u;
    let b = bases4(n0, wr);
    var a = vec4<f32>(0.0);
    let nb = p.k / 32u;
    for (var c = 0u; c < nb; c++) {
        var xv = xq(c, sl);
        var s0 = vec4<f32>(0.0); var s1 = vec4<f32>(0.0); var s2 = vec4<f32>(0.0); var s3 = vec4<f32>(0.0);
        for (var i = 0u; i < 8u; i++) {
            let j = c * 8u + i;
            s0 += xv[i] * i8x4(wt32(b.x + j * G));
            s1 += xv[i] * i8x4(wt32(b.y + j * G));
            s2 += xv[i] * i8x4(wt32(b.z + j * G));
            s3 += xv[i] * i8x4(wt32(b.w + j * G));
        }
        a += scaled4(n0, c, nb, s0, s1, s2, s3);
    }
    store4(n0, a);
}
// buflanes with two words a lane a load: u64 loads (SHADER_INT64, native only), pairs of a row's
// words interleaved by 32 as buf interleaves words: pair q of row r at (r/G)·(W/2)·G + q·G + r%G.
@group(0) @binding(8) var<storage, read> w64: array<u64>;

@compute @workgroup_size(64)
fn u64lanes(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {
    let n0 = (gid.x / G) * 4u * G + gid.x % G;
    let pr = p.k / 8u;
    let b = bases4(n0, pr);
    var a = vec4<f32>(0.0);
    let nb = p.k / 32u;
    for (var c = 0u; c < nb; c++) {
        var xv = xq(c, sl);
        var s0 = vec4<f32>(0.0); var s1 = vec4<f32>(0.0); var s2 = vec4<f32>(0.0); var s3 = vec4<f32>(0.0);
        for (var i = 0u; i < 4u; i++) {
            let j = c * 4u + i;
            let q0 = w64[b.x + j * G];
            let q1 = w64[b.y + j * G];
            let q2 = w64[b.z + j * G];
            let q3 = w64[b.w + j * G];
            s0 += xv[2u * i] * i8x4(u32(q0)) + xv[2u * i + 1u] * i8x4(u32(q0 >> 32u));
            s1 += xv[2u * i] * i8x4(u32(q1)) + xv[2u * i + 1u] * i8x4(u32(q1 >> 32u));
            s2 += xv[2u * i] * i8x4(u32(q2)) + xv[2u * i + 1u] * i8x4(u32(q2 >> 32u));
            s3 += xv[2u * i] * i8x4(u32(q3)) + xv[2u * i + 1u] * i8x4(u32(q3 >> 32u));
        }
        a += scaled4(n0, c, nb, s0, s1, s2, s3);
    }
    store4(n0, a);
}
// buflanes on 8-bit activations: x quantized to i8 a 32-value block with one f32 scale (as
// llama.cpp's CPU backend quantizes x to Q8_0 for its integer dot products), each weight word
// multiplied by dot4I8Packed.
@group(0) @binding(9) var<storage, read> xi: array<u32>;
@group(0) @binding(10) var<storage, read> xd: array<f32>;

fn xw(c: u32, l: u32) -> array<u32, 8> {
    let own = xi[c * 8u + l % 8u];
    return array<u32, 8>(subgroupBroadcast(own, 0u), subgroupBroadcast(own, 1u), subgroupBroadcast(own, 2u), subgroupBroadcast(own, 3u),
        subgroupBroadcast(own, 4u), subgroupBroadcast(own, 5u), subgroupBroadcast(own, 6u), subgroupBroadcast(own, 7u));
}

// `dotf16`: dotlanes with each block's scale an f16, two to a word (the engine keeps them so, in
// the row header): unpack2x16float and a select a row a block instead of an f32 load.
@group(0) @binding(11) var<storage, read> dh: array<u32>;

// Row r's scale of block c: an f32 of d, or with F16 (`dotf16`) an f16 of dh.
override F16: u32 = 0u;

fn scale(r: u32, c: u32, nb: u32) -> f32 {
    let i = r * nb + c;
    if F16 == 1u {
        let h = unpack2x16float(dh[i / 2u]);
        return select(h.x, h.y, (i & 1u) == 1u);
    }
    return d[i];
}

@compute @workgroup_size(64)
fn dotlanes(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {
    let n0 = (gid.x / G) * 4u * G + gid.x % G;
    let wr = p.k / 4u;
    let b = bases4(n0, wr);
    var a0 = 0.0; var a1 = 0.0; var a2 = 0.0; var a3 = 0.0;
    let nb = p.k / 32u;
    for (var c = 0u; c < nb; c++) {
        var xv = xw(c, sl);
        var s0 = 0; var s1 = 0; var s2 = 0; var s3 = 0;
        for (var i = 0u; i < 8u; i++) {
            let j = c * 8u + i;
            s0 += dot4I8Packed(w[b.x + j * G], xv[i]);
            s1 += dot4I8Packed(w[b.y + j * G], xv[i]);
            s2 += dot4I8Packed(w[b.z + j * G], xv[i]);
            s3 += dot4I8Packed(w[b.w + j * G], xv[i]);
        }
        let dx = xd[c];
        a0 += scale(n0, c, nb) * dx * f32(s0);
        a1 += scale(n0 + G, c, nb) * dx * f32(s1);
        a2 += scale(n0 + 2u * G, c, nb) * dx * f32(s2);
        a3 += scale(n0 + 3u * G, c, nb) * dx * f32(s3);
    }
    store4(n0, vec4<f32>(a0, a1, a2, a3));
}
// dotlanes as the engine's matvec_lanes is shaped (bisecting why the engine kernel lost dotlanes'
// gain): RR rows an invocation through arrays and loops (row bases and sums in arrays).
override RR: u32 = 4u;

@compute @workgroup_size(64)
fn dotarr(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {
    let n0 = (gid.x / G) * RR * G + gid.x % G;
    let wr = p.k / 4u;
    let nb = p.k / 32u;
    var rb: array<u32, 8>;
    var acc: array<f32, 8>;
    for (var j = 0u; j < RR; j++) {
        let r = min(n0 + j * G, p.n - 1u);
        rb[j] = (r / G) * wr * G + r % G;
        acc[j] = 0.0;
    }
    for (var c = 0u; c < nb; c++) {
        var xv = xw(c, sl);
        for (var j = 0u; j < RR; j++) {
            var s = 0;
            for (var i = 0u; i < 8u; i++) {
                s += dot4I8Packed(w[rb[j] + (c * 8u + i) * G], xv[i]);
            }
            acc[j] += d[min(n0 + j * G, p.n - 1u) * nb + c] * xd[c] * f32(s);
        }
    }
    for (var j = 0u; j < RR; j++) {
        if n0 + j * G < p.n { y[n0 + j * G] = acc[j]; }
    }
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
            required_features: wgpu::Features::SUBGROUP | wgpu::Features::SHADER_INT64,
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
    let pr = wr / 2;
    let mut pair_words = vec![0u32; rows.len()];
    for r in 0..n as usize {
        for q in 0..pr {
            let idx = (r / g) * pr * g + q * g + r % g;
            pair_words[idx * 2..idx * 2 + 2].copy_from_slice(&rows[r * wr + 2 * q..r * wr + 2 * q + 2]);
        }
    }
    let nb = (k / 32) as usize;
    let d: Vec<f32> = (0..n as usize * nb).map(|i| 1.0 / (1.0 + (i % 7) as f32)).collect();
    let x: Vec<f32> = (0..k as usize).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
    // x as Q8_0: a scale a 32-value block, values rounded to i8, four to a word (byte i = value i).
    let xd: Vec<f32> = x.chunks(32).map(|b| b.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0).collect();
    let xi: Vec<u32> = x
        .chunks(4)
        .enumerate()
        .map(|(w, q)| {
            let s = xd[w / 8];
            q.iter().enumerate().fold(0u32, |acc, (b, v)| acc | ((((v / s).round() as i32) as u8 as u32) << (8 * b)))
        })
        .collect();
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
    let w4b = storage(bytemuck::cast_slice(&tex_words), "w4");
    let w64b = storage(bytemuck::cast_slice(&pair_words), "w64");
    let db = storage(bytemuck::cast_slice(&d), "d");
    let xib = storage(bytemuck::cast_slice(&xi), "xi");
    // The scales as f16, two to a word (d's values are exact in f16 only approximately: dotf16's y
    // differs from dotlanes' by that rounding too).
    let dh_words: Vec<u32> = d
        .chunks(2)
        .map(|p| half::f16::from_f32(p[0]).to_bits() as u32 | (half::f16::from_f32(*p.get(1).unwrap_or(&0.0)).to_bits() as u32) << 16)
        .collect();
    let dhb = storage(bytemuck::cast_slice(&dh_words), "dh");
    let xdb = storage(bytemuck::cast_slice(&xd), "xd");
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
    // A texture of `words`, `per_texel` words a texel and `width` texels a row (the last row padded
    // with zeros).
    let texture = |format: wgpu::TextureFormat, words: &[u32], per_texel: usize, width: usize| {
        let height = (words.len() / per_texel).div_ceil(width);
        let mut data = words.to_vec();
        data.resize(width * height * per_texel, 0);
        let size = wgpu::Extent3d { width: width as u32, height: height as u32, depth_or_array_layers: 1 };
        let tex = device.create_texture(&wgpu::TextureDescriptor {
            label: None,
            size,
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format,
            usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
            view_formats: &[],
        });
        queue.write_texture(
            wgpu::TexelCopyTextureInfo { texture: &tex, mip_level: 0, origin: wgpu::Origin3d::ZERO, aspect: wgpu::TextureAspect::All },
            bytemuck::cast_slice(&data),
            wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some((width * per_texel * 4) as u32),
                rows_per_image: Some(height as u32),
            },
            size,
        );
        tex.create_view(&wgpu::TextureViewDescriptor::default())
    };
    let view = texture(wgpu::TextureFormat::Rgba32Uint, &tex_words, 4, tex_w);
    let view32 = texture(wgpu::TextureFormat::R32Uint, &buf_words, 1, 8192);
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor { label: None, source: wgpu::ShaderSource::Wgsl(SRC.into()) });
    let mut results = Vec::new();
    const VARIANTS: [&str; 12] =
        ["buf", "tex", "uni", "buflanes", "texlanes", "v4lanes", "r32lanes", "u64lanes", "dotlanes", "dotarr4", "dotarr8", "dotf16"];
    for entry in VARIANTS.iter().chain(VARIANTS.iter()).copied() {
        // dotarr4 / dotarr8: entry dotarr with RR rows an invocation.
        let rows: u32 = if entry == "dotarr8" { 8 } else { 4 };
        let rows_constant: Vec<(&str, f64)> = match entry {
            "dotarr4" | "dotarr8" => vec![("RR", rows as f64)],
            "dotf16" => vec![("F16", 1.0)],
            _ => vec![],
        };
        let pipe = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: None,
            module: &module,
            entry_point: Some(if entry == "dotf16" { "dotlanes" } else { entry.trim_end_matches(['4', '8']) }),
            compilation_options: wgpu::PipelineCompilationOptions { constants: &rows_constant, ..Default::default() },
            cache: None,
        });
        let mut entries = vec![
            wgpu::BindGroupEntry { binding: 0, resource: p.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 1, resource: xb.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 2, resource: yb.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 4, resource: db.as_entire_binding() },
        ];
        if entry == "r32lanes" {
            entries.push(wgpu::BindGroupEntry { binding: 7, resource: wgpu::BindingResource::TextureView(&view32) });
        } else if entry == "u64lanes" {
            entries.push(wgpu::BindGroupEntry { binding: 8, resource: w64b.as_entire_binding() });
        } else if entry.starts_with("dot") {
            entries.push(wgpu::BindGroupEntry { binding: 3, resource: wb.as_entire_binding() });
            entries.push(wgpu::BindGroupEntry { binding: 9, resource: xib.as_entire_binding() });
            entries.push(wgpu::BindGroupEntry { binding: 10, resource: xdb.as_entire_binding() });
            entries.retain(|e| e.binding != 1); // x is read as xi and xd
            if entry == "dotlanes" || entry == "dotf16" {
                entries.push(wgpu::BindGroupEntry { binding: 11, resource: dhb.as_entire_binding() });
                // F16 picks d or dh
            }
        } else if entry == "v4lanes" {
            entries.push(wgpu::BindGroupEntry { binding: 6, resource: w4b.as_entire_binding() });
        } else if !entry.starts_with("tex") {
            entries.push(wgpu::BindGroupEntry { binding: 3, resource: wb.as_entire_binding() });
        } else {
            entries.push(wgpu::BindGroupEntry { binding: 5, resource: wgpu::BindingResource::TextureView(&view) });
        }
        let bg =
            device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &pipe.get_bind_group_layout(0), entries: &entries });
        let invocations = n / rows;
        let mut times = Vec::new();
        for rep in 0..reps {
            let mut enc = device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipe);
                pass.set_bind_group(0, &bg, &[]);
                pass.dispatch_workgroups(invocations.div_ceil(if entry == "uni" { 8 } else { 64 }), 1, 1);
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
    for (i, name) in VARIANTS.iter().enumerate().skip(1) {
        let diff = results[0].iter().zip(&results[i]).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        let scale = results[0].iter().fold(0.0f32, |m, v| m.max(v.abs()));
        println!("max |y_buf - y_{name}| = {diff} (of max |y| {scale})");
    }
}
