// oracle_ref: the reference planner (the oracle before its fast path), same contract as oracle.h
// and byte-identical plans.  Tests and bench_oracle compare the fast oracle with it.
#ifndef BP_ORACLE_REF_H
#define BP_ORACLE_REF_H

#include "oracle.h"

typedef struct oref_impl oref_impl;
typedef struct {
    oref_impl *impl;
} oracle_ref;

int oracle_ref_init(oracle_ref *o, const oracle_config *cfg);
int oracle_ref_push_batch(oracle_ref *o, const uint32_t *ids);
int oracle_ref_push_samples(oracle_ref *o, const uint32_t *ids, uint32_t n);
int oracle_ref_finish(oracle_ref *o);
int oracle_ref_next_plan(oracle_ref *o, plan *p);
int oracle_ref_done(const oracle_ref *o);
void oracle_ref_get_stats(const oracle_ref *o, oracle_stats *st);
void oracle_ref_free(oracle_ref *o);

#endif
