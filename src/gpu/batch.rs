//! **Unstable** (no semver promise): the kernel layer's batches. A batch of dispatches: recorded into one compute pass, their parameter blocks uploaded in one
//! write at submission, GPU errors collected by the error scopes around it.

use crate::error::{Error, Result};

use super::{Gpu, Kernel, Scopes};

/// Parameter slots in the arena; a batch with more dispatches submits in parts.
pub(super) const PARAM_SLOTS: u64 = 4096;
/// Largest parameter block a kernel may use, in bytes.
pub const MAX_PARAMS: usize = 64;

impl Gpu {
    /// Starts recording a batch of dispatches. One batch records at a time.
    pub fn batch(&self) -> Result<Batch<'_>> {
        self.check_alive()?;
        if self.batch_open.replace(true) {
            return Err(Error::Validation("a batch is already being recorded on this Gpu".into()));
        }
        Ok(Batch { gpu: self, enc: None, pass: None, slot: 0, params: Vec::new(), scopes: Some(Scopes::push(&self.device)) })
    }
}

/// **Unstable.** A batch of recorded dispatches, submitted together: one compute pass (a pass per dispatch
/// while profiling, to time each), and one upload of every dispatch's parameter block at
/// submission. When the arena's slots run out the batch submits what it has and goes on.
pub struct Batch<'g> {
    /// The open compute pass (its encoder borrow released with `forget_lifetime`; it is always
    /// ended before `enc` is used again, and dropped before it: fields drop in order).
    pass: Option<wgpu::ComputePass<'static>>,
    gpu: &'g Gpu,
    enc: Option<wgpu::CommandEncoder>,
    slot: u64,
    /// Parameter blocks of the dispatches recorded since the last upload, `param_slot` apart.
    params: Vec<u8>,
    scopes: Option<Scopes>,
}

impl<'g> Batch<'g> {
    /// The GPU the batch records for.
    pub fn gpu(&self) -> &'g Gpu {
        self.gpu
    }

    /// Records one dispatch of `kernel` with `params` (at most `MAX_PARAMS` bytes) over
    /// `buffers` (bindings 1..), with override `constants`.
    pub fn dispatch(
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
            wgpu::ComputePassTimestampWrites {
                query_set: &p.set,
                beginning_of_pass_write_index: Some(2 * i),
                end_of_pass_write_index: Some(2 * i + 1),
            }
        });
        if timed.is_some() {
            self.pass = None;
        }
        let pass = match &mut self.pass {
            Some(p) => p,
            None => {
                let enc = self.enc.get_or_insert_with(|| self.gpu.device.create_command_encoder(&Default::default()));
                let pass = enc
                    .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("hotprefix"), timestamp_writes: timed.clone() })
                    .forget_lifetime();
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
            self.gpu.queue.submit([enc.finish()]);
            self.gpu.count(|c| c.submits += 1);
        }
        self.slot = 0;
    }

    /// Submits everything and reports any GPU error raised while recording or submitting.
    pub async fn submit(mut self) -> Result<()> {
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
