//! `hotprefix`: the native command line. For now: `hotprefix bench kernels`.

use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};
use hotprefix::gpu::Gpu;
use hotprefix::quant::Format;
use hotprefix::selftest::time_matmul;

#[derive(Parser)]
#[command(name = "hotprefix", version, about = "Small LLMs on WebGPU with a resident prompt cache")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print benchmark figures for the current adapter.
    Bench {
        /// What to measure.
        what: BenchWhat,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum BenchWhat {
    /// Matmul GFLOP/s at prefill shapes and matrix-vector GB/s per weight format, beside CPU baselines.
    Kernels,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Bench { what: BenchWhat::Kernels } => pollster::block_on(bench_kernels()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hotprefix: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Best of `runs` timings of `f`, in seconds.
fn best_of(runs: usize, mut f: impl FnMut()) -> f64 {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// Plain CPU read bandwidth: sum a 256 MiB f32 array with `threads` threads.
fn cpu_read_gbs(threads: usize) -> f64 {
    let data = vec![1.0f32; 64 << 20];
    let chunk = data.len() / threads;
    let secs = best_of(5, || {
        let total: f32 = std::thread::scope(|s| {
            let hs: Vec<_> = data
                .chunks(chunk)
                .map(|c| s.spawn(move || c.chunks_exact(16).fold([0f32; 16], |mut a, b| {
                    for i in 0..16 {
                        a[i] += b[i];
                    }
                    a
                }).iter().sum::<f32>()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
        });
        std::hint::black_box(total);
    });
    (data.len() * 4) as f64 / secs / 1e9
}

/// CPU sgemm (matrixmultiply crate, its own threading) GFLOP/s for `[m, k] · [k, n]`.
fn cpu_sgemm_gflops(m: usize, k: usize, n: usize) -> f64 {
    let a = vec![0.5f32; m * k];
    let b = vec![0.25f32; k * n];
    let mut c = vec![0f32; m * n];
    let secs = best_of(3, || unsafe {
        matrixmultiply::sgemm(m, k, n, 1.0, a.as_ptr(), k as isize, 1, b.as_ptr(), 1, k as isize, 0.0, c.as_mut_ptr(), n as isize, 1);
    });
    std::hint::black_box(&c);
    2.0 * (m * k * n) as f64 / secs / 1e9
}

async fn bench_kernels() -> hotprefix::Result<()> {
    let gpu = Gpu::new().await?;
    println!("adapter: {}", gpu.describe());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let bw1 = cpu_read_gbs(1);
    let bwn = cpu_read_gbs(threads);
    println!("cpu read bandwidth (256 MiB, sum): {bw1:.1} GB/s 1 thread, {bwn:.1} GB/s {threads} threads");

    println!("\nprefill matmul, T = 512 (GPU = our kernel; CPU = matrixmultiply sgemm on f32, {threads} threads)");
    println!("{:<8} {:>6} {:>6} {:>10} {:>12} {:>12}", "weights", "K", "N", "ms", "GPU GFLOP/s", "CPU GFLOP/s");
    let t = 512;
    for (format, k, n) in [(Format::Q4_1, 576, 576), (Format::Q4_1, 576, 1536), (Format::Q4_1, 1536, 576), (Format::Q8_0, 576, 49152)] {
        let reps = if n > 10_000 { 2 } else { 10 };
        let (ms, _) = time_matmul(&gpu, format, t, k, n, reps).await?;
        let gflops = 2.0 * (t * k * n) as f64 / (ms * 1e6);
        let cpu = cpu_sgemm_gflops(t, k, n);
        println!("{:<8} {k:>6} {n:>6} {ms:>10.2} {gflops:>12.2} {cpu:>12.2}", format.name());
    }

    println!("\nmatrix-vector, T = 1: effective GB/s = weight bytes / time (vs CPU read {bwn:.1} GB/s)");
    println!("{:<8} {:>6} {:>6} {:>10} {:>10} {:>8} {:>12}", "weights", "K", "N", "MiB", "ms", "GB/s", "% of CPU bw");
    let shapes = [(1536, 16384), (576, 49152), (576, 1536), (1536, 576)];
    for format in Format::ALL {
        for (k, n) in shapes {
            let (ms, bytes) = time_matmul(&gpu, format, 1, k, n, 50).await?;
            let gbs = bytes as f64 / (ms * 1e6);
            let mib = bytes as f64 / (1 << 20) as f64;
            println!("{:<8} {k:>6} {n:>6} {mib:>10.1} {ms:>10.3} {gbs:>8.2} {:>11.0}%", format.name(), 100.0 * gbs / bwn);
        }
    }
    Ok(())
}
