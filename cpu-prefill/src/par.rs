//! A minimal work pool on `std::thread::scope`: independent jobs, taken one at a time by
//! `threads` workers, results returned in job order.
//!
//! Why results do not depend on the thread count: every job is a fixed piece of work (its
//! boundaries are chosen by the caller, never from the number of threads) that reads shared
//! inputs and writes only its own output; nothing is reduced across jobs. Which worker runs a
//! job changes when it runs, not what it computes.

use std::sync::Mutex;

/// Runs `f` on every job and returns the results in job order. With `threads <= 1` (or one
/// job) everything runs on the calling thread.
pub fn map<T, R, F>(threads: usize, jobs: Vec<T>, f: F) -> Vec<R>
where
    T: Send,
    R: Send,
    F: Fn(T) -> R + Sync,
{
    let n = jobs.len();
    let workers = threads.min(n);
    if workers <= 1 {
        return jobs.into_iter().map(f).collect();
    }
    let queue = Mutex::new(jobs.into_iter().enumerate());
    // A worker pops the next job until the queue is empty. A poisoned lock means another
    // worker panicked; that panic is re-raised by `scope`, so stopping here is enough.
    let work = || {
        let mut done = Vec::new();
        loop {
            let next = match queue.lock() {
                Ok(mut q) => q.next(),
                Err(_) => None,
            };
            let Some((i, job)) = next else { break };
            done.push((i, f(job)));
        }
        done
    };
    let mut results: Vec<(usize, R)> = std::thread::scope(|s| {
        let others: Vec<_> = (1..workers).map(|_| s.spawn(work)).collect();
        let mut all = work();
        for h in others {
            match h.join() {
                Ok(part) => all.extend(part),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        all
    });
    results.sort_unstable_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}

/// Runs `f(first_row, block)` on consecutive blocks of `rows_per_block` rows of a row-major
/// `data` (rows of `row_len`), in parallel. Block boundaries depend only on `rows_per_block`.
pub fn for_row_blocks<F>(
    threads: usize,
    data: &mut [f32],
    row_len: usize,
    rows_per_block: usize,
    f: F,
) where
    F: Fn(usize, &mut [f32]) + Sync,
{
    if data.is_empty() || row_len == 0 {
        return;
    }
    let jobs: Vec<(usize, &mut [f32])> = data
        .chunks_mut(row_len * rows_per_block.max(1))
        .enumerate()
        .map(|(b, block)| (b * rows_per_block.max(1), block))
        .collect();
    map(threads, jobs, |(row, block)| f(row, block));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_job_order() {
        for threads in [1, 2, 5] {
            let out = map(threads, (0..100).collect(), |x: i32| x * x);
            assert_eq!(out, (0..100).map(|x| x * x).collect::<Vec<_>>());
        }
    }

    #[test]
    fn row_blocks_cover_every_row() {
        let mut data = vec![0.0f32; 7 * 3];
        for_row_blocks(3, &mut data, 3, 2, |row, block| {
            for (r, chunk) in block.chunks_mut(3).enumerate() {
                chunk.fill((row + r) as f32);
            }
        });
        for (r, chunk) in data.chunks(3).enumerate() {
            assert!(chunk.iter().all(|&v| v == r as f32));
        }
    }
}
