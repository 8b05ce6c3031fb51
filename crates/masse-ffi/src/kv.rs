//! Key-value calls: put, get, delete, write batches, get_many, iteration.

use crate::error::*;
use crate::pool::{masse_pool, out_ptr, pool_ref, Shared};
use masse::{Db, Iter, WriteBatch};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

/// A byte slice from C (NULL is allowed only with length 0).
pub(crate) fn bytes<'a>(p: *const u8, n: usize, what: &str) -> R<&'a [u8]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(fail(MASSE_INVALID, format!("{what} is NULL")));
    }
    // SAFETY: the caller passes `n` readable bytes at `p`.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// A copy of `v` in memory from `malloc` (the caller frees it with `free`).
fn malloc_copy(v: &[u8]) -> R<*mut u8> {
    // SAFETY: malloc of at least one byte; checked for NULL; then a copy of
    // `v.len()` bytes into the new block.
    unsafe {
        let p = libc::malloc(v.len().max(1)) as *mut u8;
        if p.is_null() {
            return Err(fail(MASSE_IO, "out of memory"));
        }
        std::ptr::copy_nonoverlapping(v.as_ptr(), p, v.len());
        Ok(p)
    }
}

/// Store `val` under `key`, durably (an acknowledged put survives a crash).
///
/// # Safety
/// `pool` is an open pool; `key`/`val` point to `klen`/`vlen` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn masse_put(
    pool: *const masse_pool,
    key: *const u8,
    klen: usize,
    val: *const u8,
    vlen: usize,
) -> masse_status {
    guard(|| {
        let p = pool_ref(pool)?;
        p.sh.db
            .put(bytes(key, klen, "key")?, bytes(val, vlen, "value")?)?;
        Ok(())
    })
}

/// The value of `key`, in a new `malloc` block the caller frees with `free`
/// (`*val` is set even for an empty value). `MASSE_NOT_FOUND` if there is none.
///
/// # Safety
/// `pool` is an open pool; `key` points to `klen` bytes; `val`, `vlen` are writable.
#[no_mangle]
pub unsafe extern "C" fn masse_get(
    pool: *const masse_pool,
    key: *const u8,
    klen: usize,
    val: *mut *mut u8,
    vlen: *mut usize,
) -> masse_status {
    guard(|| {
        let p = pool_ref(pool)?;
        out_ptr(val)?;
        if vlen.is_null() {
            return Err(fail(MASSE_INVALID, "vlen is NULL"));
        }
        match p.sh.db.get(bytes(key, klen, "key")?)? {
            Some(v) => {
                *val = malloc_copy(&v)?;
                *vlen = v.len();
                Ok(())
            }
            None => Err(fail(MASSE_NOT_FOUND, "no such key")),
        }
    })
}

/// Delete `key`, durably. `*existed` (if not NULL) says whether it held a value.
///
/// # Safety
/// `pool` is an open pool; `key` points to `klen` bytes; `existed` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn masse_delete(
    pool: *const masse_pool,
    key: *const u8,
    klen: usize,
    existed: *mut bool,
) -> masse_status {
    guard(|| {
        let p = pool_ref(pool)?;
        let e = p.sh.db.delete(bytes(key, klen, "key")?)?;
        if !existed.is_null() {
            *existed = e;
        }
        Ok(())
    })
}

/// The values of `n` keys, their device reads issued together. For each key
/// `i`, `statuses[i]` is `MASSE_OK` with `vals[i]` a `malloc` block of
/// `vlens[i]` bytes (free it with `free`), or `MASSE_NOT_FOUND` with `vals[i]`
/// NULL. The call's own status is `MASSE_OK` unless the whole call failed.
///
/// # Safety
/// `keys`/`klens` hold `n` entries; `vals`, `vlens`, `statuses` have room for `n`.
#[no_mangle]
pub unsafe extern "C" fn masse_get_many(
    pool: *const masse_pool,
    n: usize,
    keys: *const *const u8,
    klens: *const usize,
    vals: *mut *mut u8,
    vlens: *mut usize,
    statuses: *mut masse_status,
) -> masse_status {
    guard(|| {
        let p = pool_ref(pool)?;
        if n == 0 {
            return Ok(());
        }
        if keys.is_null()
            || klens.is_null()
            || vals.is_null()
            || vlens.is_null()
            || statuses.is_null()
        {
            return Err(fail(MASSE_INVALID, "an array argument is NULL"));
        }
        let mut ks = Vec::with_capacity(n);
        for i in 0..n {
            ks.push(bytes(*keys.add(i), *klens.add(i), "keys[i]")?);
        }
        let got = p.sh.db.get_many(&ks)?;
        for (i, v) in got.into_iter().enumerate() {
            match v {
                Some(v) => {
                    *vals.add(i) = malloc_copy(&v)?;
                    *vlens.add(i) = v.len();
                    *statuses.add(i) = MASSE_OK;
                }
                None => {
                    *vals.add(i) = std::ptr::null_mut();
                    *vlens.add(i) = 0;
                    *statuses.add(i) = MASSE_NOT_FOUND;
                }
            }
        }
        Ok(())
    })
}

/// Puts and deletes applied together by `masse_write`: after a crash, all or none.
pub struct masse_batch {
    b: WriteBatch,
}

/// A new, empty write batch (free it with `masse_batch_free`). Never NULL.
#[no_mangle]
pub extern "C" fn masse_batch_new() -> *mut masse_batch {
    Box::into_raw(Box::new(masse_batch {
        b: WriteBatch::new(),
    }))
}

/// Add a put to the batch.
///
/// # Safety
/// `b` is a live batch; `key`/`val` point to `klen`/`vlen` bytes.
#[no_mangle]
pub unsafe extern "C" fn masse_batch_put(
    b: *mut masse_batch,
    key: *const u8,
    klen: usize,
    val: *const u8,
    vlen: usize,
) -> masse_status {
    guard(|| {
        let b = b
            .as_mut()
            .ok_or_else(|| fail(MASSE_INVALID, "batch is NULL"))?;
        b.b.put(bytes(key, klen, "key")?, bytes(val, vlen, "value")?)?;
        Ok(())
    })
}

/// Add a delete to the batch.
///
/// # Safety
/// `b` is a live batch; `key` points to `klen` bytes.
#[no_mangle]
pub unsafe extern "C" fn masse_batch_delete(
    b: *mut masse_batch,
    key: *const u8,
    klen: usize,
) -> masse_status {
    guard(|| {
        let b = b
            .as_mut()
            .ok_or_else(|| fail(MASSE_INVALID, "batch is NULL"))?;
        b.b.delete(bytes(key, klen, "key")?)?;
        Ok(())
    })
}

/// Apply the batch atomically and durably, and empty it (it can be reused).
/// On failure nothing was applied and the batch is emptied all the same.
///
/// # Safety
/// `pool` is an open pool; `b` is a live batch not used by another thread.
#[no_mangle]
pub unsafe extern "C" fn masse_write(pool: *const masse_pool, b: *mut masse_batch) -> masse_status {
    guard(|| {
        let p = pool_ref(pool)?;
        let b = b
            .as_mut()
            .ok_or_else(|| fail(MASSE_INVALID, "batch is NULL"))?;
        p.sh.db.write(std::mem::take(&mut b.b))?;
        Ok(())
    })
}

/// Free a batch (NULL is fine).
///
/// # Safety
/// `b` is NULL or a batch from `masse_batch_new` not yet freed.
#[no_mangle]
pub unsafe extern "C" fn masse_batch_free(b: *mut masse_batch) {
    if !b.is_null() {
        drop(Box::from_raw(b));
    }
}

/// An unordered walk over every live key of the pool (file-layer records
/// included: their keys start with a NUL byte). GC waits while it is open:
/// free it promptly. Use it from the thread that created it.
pub struct masse_iter {
    // Field order matters: the iterator borrows the engine that `pool` keeps
    // alive, so it is dropped first.
    it: Iter<'static>,
    cur: (Vec<u8>, Vec<u8>),
    pool: Arc<Shared>,
}

/// Start an iteration.
///
/// # Safety
/// `pool` is an open pool; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn masse_iter_new(
    pool: *const masse_pool,
    out: *mut *mut masse_iter,
) -> masse_status {
    guard(|| {
        let p = pool_ref(pool)?;
        out_ptr(out)?;
        let sh = p.sh.clone();
        // SAFETY: the engine lives in `sh.db` (an Arc) as long as the iterator's
        // `pool` field; `masse_iter` drops `it` before `pool`.
        let db: &'static Db = &*Arc::as_ptr(&sh.db);
        let it = db.iter();
        sh.handles.fetch_add(1, SeqCst);
        *out = Box::into_raw(Box::new(masse_iter {
            it,
            cur: (Vec::new(), Vec::new()),
            pool: sh,
        }));
        Ok(())
    })
}

/// The next key and value: pointers valid until the next call on this iterator.
/// `MASSE_NOT_FOUND` at the end.
///
/// # Safety
/// `it` is a live iterator; the four output pointers are writable.
#[no_mangle]
pub unsafe extern "C" fn masse_iter_next(
    it: *mut masse_iter,
    key: *mut *const u8,
    klen: *mut usize,
    val: *mut *const u8,
    vlen: *mut usize,
) -> masse_status {
    guard(|| {
        let it = it
            .as_mut()
            .ok_or_else(|| fail(MASSE_INVALID, "iterator is NULL"))?;
        if key.is_null() || klen.is_null() || val.is_null() || vlen.is_null() {
            return Err(fail(MASSE_INVALID, "an output pointer is NULL"));
        }
        match it.it.next() {
            None => Err(fail(MASSE_NOT_FOUND, "end of iteration")),
            Some(r) => {
                it.cur = r?;
                *key = it.cur.0.as_ptr();
                *klen = it.cur.0.len();
                *val = it.cur.1.as_ptr();
                *vlen = it.cur.1.len();
                Ok(())
            }
        }
    })
}

/// End an iteration (NULL is fine).
///
/// # Safety
/// `it` is NULL or a live iterator.
#[no_mangle]
pub unsafe extern "C" fn masse_iter_free(it: *mut masse_iter) {
    if it.is_null() {
        return;
    }
    let it = Box::from_raw(it);
    let pool = it.pool.clone();
    drop(it); // lets GC run again
    pool.handles.fetch_sub(1, SeqCst);
}
