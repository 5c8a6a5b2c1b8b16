// Matrix-vector product for CPU adapters with subgroups of at least 8 lanes (ops::Kind::Lanes),
// block formats (Q8_0, Q4_1). Appended to matmul.wgsl (ops.rs concatenates them), whose layout,
// bindings, x_at, dot_chunk, finish, store, FORMAT, XLOAD, ACC, WG, G and R it uses: a module of
// its own, because subgroup operations need the device's SUBGROUP feature (no `enable
// subgroups;`: naga, wgpu 30, rejects it, so the kernel is used natively only).
//
// As `matvec`, each invocation computes R rows of token t. But `matvec` has every lane load all 32
// x values of a block for its rows, and lavapipe 25.0 turns each of those loads into a loop over
// the 8 lanes of its vector: the same address, loaded 8 times. Here lane l of each 8 loads (and
// normalises, or gates) quad l % 8 of the block once, and subgroupBroadcast hands the 8 quads to
// every lane: the x loads a block drop from 32 a lane to 4.

@compute @workgroup_size(WG)
fn matvec_lanes(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_invocation_id) sl: u32) {
    let t = wid.y;
    let n0 = (gid.x / G) * R * G + gid.x % G;
    // No early return: every lane takes part in the broadcasts. Rows past N repeat the last one
    // and are not stored.
    let chunks = p.k / 32u;
    var rb: array<u32, 8>;
    var acc: array<vec4<f32>, 8>;
    for (var j = 0u; j < R; j++) {
        rb[j] = row_base(min(n0 + j * G, p.n - 1u));
        acc[j] = vec4<f32>(0.0);
    }
    var xv: array<vec4<f32>, 8>;
    var ss = 0.0;
    for (var c = 0u; c < chunks; c++) {
        let own = x_at(t, c * 8u + sl % 8u, &ss);
        xv[0] = subgroupBroadcast(own, 0u);
        xv[1] = subgroupBroadcast(own, 1u);
        xv[2] = subgroupBroadcast(own, 2u);
        xv[3] = subgroupBroadcast(own, 3u);
        xv[4] = subgroupBroadcast(own, 4u);
        xv[5] = subgroupBroadcast(own, 5u);
        xv[6] = subgroupBroadcast(own, 6u);
        xv[7] = subgroupBroadcast(own, 7u);
        let xsum = xv[0] + xv[1] + xv[2] + xv[3] + xv[4] + xv[5] + xv[6] + xv[7];
        for (var j = 0u; j < R; j++) {
            acc[j] += dot_chunk(rb[j], c, &xv, xsum);
        }
    }
    // XLOAD 1: each lane summed the squares of its own quads; Σx² is the sum over the 8.
    ss += subgroupShuffleXor(ss, 4u);
    ss += subgroupShuffleXor(ss, 2u);
    ss += subgroupShuffleXor(ss, 1u);
    for (var j = 0u; j < R; j++) {
        let n = n0 + j * G;
        if n < p.n {
            store(t * p.n + n, finish(dot(acc[j], vec4<f32>(1.0)), ss));
        }
    }
}
