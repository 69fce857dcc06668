// data_vocab: one table's frequency vocabulary for `prep --min-count K`.
//
// The first pass counts every value (vocab_count); vocab_rank then turns the counts, in place,
// into ids: values seen at least K times get ids 0, 1, ... by decreasing count, ties broken by
// increasing value; when K > 1 every value seen fewer than K times shares the last id (the rare
// bucket), so card = kept + 1; when K = 1 there is no rare bucket and card = distinct values.
// The second pass maps values through vocab_lookup.
//
// Keys are 64-bit values.  A narrow vocabulary (Criteo hex values) stores uint32 keys and holds
// the one key above 32 bits that Criteo needs, VOCAB_KEY_EXTRA = 2^32 (the "missing" value),
// in a counter beside the table; a wide one (Avazu string hashes) stores uint64 keys.  Open
// addressing with linear probing; a slot holds the key and a uint32 count/id (0 marks an empty
// slot) side by side, so a probe touches one cache line: 8 bytes narrow, 16 bytes wide.  The
// table doubles when 3/4 full, so its load stays in (3/8, 3/4] and a distinct value costs
// 10.7-21.3 bytes (narrow) or 21.3-42.7 bytes (wide); ranking needs 16 (narrow) or up to 40
// (wide, with qsort's scratch) more bytes per kept value of the table being ranked, for a while.  Counts saturate at
// 2^32 - 1, which keeps the ranking exact for fewer than 2 * (2^32 - 1) rows (two values cannot
// both reach the cap).
#ifndef BP_DATA_VOCAB_H
#define BP_DATA_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#define VOCAB_KEY_EXTRA ((uint64_t)1 << 32)

typedef struct {
    uint64_t key;
    uint32_t val;
    uint32_t pad;
} vocab_wslot;

typedef struct {
    int wide;
    uint32_t bits;         // log2 of the slot count
    uint64_t n;            // distinct keys in the slots
    uint64_t *s32;         // (1 << bits) narrow slots: key | val << 32, or NULL
    vocab_wslot *s64;      // (1 << bits) wide slots, or NULL
                           // val: count, 0 = empty; after vocab_rank: id + 1
    uint64_t extra_count;  // narrow: occurrences of VOCAB_KEY_EXTRA
    uint32_t extra_id;     // its id after vocab_rank, or UINT32_MAX if never seen
    uint32_t min_count;    // K of vocab_rank
    uint64_t card;         // ids in use after vocab_rank
    uint64_t kept;         // values with their own id
    int ranked;
} vocab;

// The functions that allocate return 0, or BP_ENOMEM saying how much the table needed (BP_ERANGE
// past 2^VOCAB_MAX_BITS slots; the caller names the table).
int vocab_init(vocab *v, int wide);
void vocab_free(vocab *v); // safe on a zeroed or freed vocab
// Counts keys[i * stride] for i in [0, n).  Narrow: keys must be < 2^32 or VOCAB_KEY_EXTRA.
int vocab_count(vocab *v, const uint64_t *keys, size_t stride, size_t n);
// Turns counts into ids (see above).  min_count >= 1.
int vocab_rank(vocab *v, uint32_t min_count);
// ids[i * ostride] = id of keys[i * stride].  Returns the number of leading keys mapped: n, or
// the index of the first key that the counting pass never saw.
size_t vocab_map(const vocab *v, const uint64_t *keys, size_t stride, size_t n, uint32_t *ids, size_t ostride);
// A digest of the ranked vocabulary's value -> id map (the same map gives the same digest, whatever
// order the values were counted in; another map, another digest but with probability ~2^-64).
uint64_t vocab_fingerprint(const vocab *v);
uint64_t vocab_distinct(const vocab *v);    // distinct values counted (with the extra key)
uint64_t vocab_mem_bytes(const vocab *v);   // bytes held by the table

#endif
