# Sharded arrays (_shards_read.pyx): shards() of a jax array through a plan per (sharding, global
# shape), each shard view holding its per-device buffer; Python-level only (registered with
# add_sharded_type); nothing here is cimported by other modules.
