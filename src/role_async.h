// role_async: mode async's trainer (role_async_check and role_async_run are in dist.h) and its
// bounded row cache, declared here so that the tests can drive it.
#ifndef BP_ROLE_ASYNC_H
#define BP_ROLE_ASYNC_H

#include <stddef.h>
#include <stdint.h>

#include "role_loop.h"

// A trainer's cache of at most C rows (their model part, E floats).  A slot holds the row of
// key[slot] as the fetch of iteration fetched[slot] returned it: the server's value after the
// iterations before it, so read at t the row is t - fetched[slot] iterations old.
typedef struct {
    uint64_t C, n, peak;     // capacity, resident rows, most resident at once
    int E, lfu;              // row floats; eviction policy: LFU (1) or LRU (0)
    float *rows;             // (C, E)
    size_t rows_bytes;
    uint64_t *key;           // (C)
    int64_t *fetched, *used; // (C) iteration of the fetch that filled the slot; last iteration read
    uint64_t *freq;          // (C) iterations read since the row entered
    uint32_t *heap, *hpos;   // (C) resident slots in eviction order (a min-heap); a slot's index in it
    uint64_t hn;             // slots in the heap
    uint32_t *stash;         // (C) slots held out of the heap during one read
    role_keymap map;         // key -> slot
    uint64_t misses, refreshes, evictions; // since init
} role_async_cache;

// BP_EUSAGE / BP_ENOMEM with a message naming --cache-rows.
int role_async_cache_init(role_async_cache *c, uint64_t C, int E, int lfu);
void role_async_cache_free(role_async_cache *c); // safe on a zeroed one
// Iteration t reads the U unique keys uk (ascending; U <= C).  Each resident key counts as read
// at t (LRU: used = t; LFU: freq + 1).  A resident key read at most `bound` iterations after its
// fetch is a hit; an older one is refreshed in its slot; a missing one takes a free slot or
// evicts the resident row first in eviction order among those not read at t: LRU the least
// recently read, LFU the least often read, ties by key ascending.  uslot[u] (U) gets every
// key's slot; fu (U) the indices u of the keys to fetch, ascending; returns their number.  The
// caller fills those slots' rows and sets fetched[slot] = t.
uint32_t role_async_cache_read(role_async_cache *c, int64_t t, const uint64_t *uk, int U, int64_t bound,
                               uint32_t *uslot, uint32_t *fu);

#endif
