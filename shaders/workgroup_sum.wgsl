// Σ of one value a lane over a 64-lane workgroup, by a tree in workgroup memory: the kernels that
// take a row a workgroup (rmsnorm.wgsl, head_norm.wgsl) are concatenated after this file
// (ops/rmsnorm.rs, ops/head_norm.rs).

const WG: u32 = 64u;
var<workgroup> red: array<f32, WG>;

// The sum of `v` over the workgroup's lanes (`l`: the lane), in every lane. Call it in uniform
// control flow: it has barriers.
fn workgroup_sum(l: u32, v: f32) -> f32 {
    red[l] = v;
    workgroupBarrier();
    for (var h = WG / 2u; h > 0u; h >>= 1u) {
        if l < h {
            red[l] += red[l + h];
        }
        workgroupBarrier();
    }
    return red[0];
}
