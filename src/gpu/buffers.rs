//! **Unstable** (no semver promise): the kernel layer's raw buffers. Storage buffers created inside
//! error scopes (out-of-memory is a typed error), queued writes, and readback through one reused
//! staging buffer.

use crate::error::{Error, Result};

use super::{Gpu, Scopes};

impl Gpu {
    /// Creates a storage buffer (inside error scopes, so out-of-memory is a typed error).
    pub async fn storage(&self, label: &str, bytes: u64) -> Result<wgpu::Buffer> {
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
    pub async fn upload<T: bytemuck::Pod>(&self, label: &str, data: &[T]) -> Result<wgpu::Buffer> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let buf = self.storage(label, bytes.len() as u64).await?;
        self.write(&buf, 0, data);
        Ok(buf)
    }

    /// Queues a write of `data` at byte `offset` (applied before the next submission runs).
    pub fn write<T: bytemuck::Pod>(&self, buf: &wgpu::Buffer, offset: u64, data: &[T]) {
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
        let limit = self.binding_limit();
        if bytes > limit {
            return Err(Error::TooLarge { what: what.to_string(), bytes, limit });
        }
        Ok(())
    }

    /// Copies `bytes` bytes from the start of `buf` back to the CPU.
    pub async fn read(&self, buf: &wgpu::Buffer, bytes: u64) -> Result<Vec<u8>> {
        self.read_ranges(buf, &[(0, bytes)]).await
    }

    /// Copies the byte ranges `(offset, length)` of `buf` back to the CPU, concatenated, in one
    /// submission and one map (e.g. scattered KV pages). With several ranges, every offset and
    /// length must be a multiple of 4.
    pub async fn read_ranges(&self, buf: &wgpu::Buffer, ranges: &[(u64, u64)]) -> Result<Vec<u8>> {
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
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| Error::Readback(e.to_string()))?;
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
    pub async fn read_f32(&self, buf: &wgpu::Buffer, n: usize) -> Result<Vec<f32>> {
        let b = self.read(buf, 4 * n as u64).await?;
        Ok(bytemuck::pod_collect_to_vec(&b))
    }

    /// Reads back `n` u32 values.
    pub async fn read_u32(&self, buf: &wgpu::Buffer, n: usize) -> Result<Vec<u32>> {
        let b = self.read(buf, 4 * n as u64).await?;
        Ok(bytemuck::pod_collect_to_vec(&b))
    }
}
