"""Benchmarks: fleet-scale speed and packing quality (`gpufleet bench`, docs/performance.md).

| key | module | what |
|---|---|---|
| B1 | `speed` | `schedule()` time for 10-1,000 clusters x 8 pools, free-GPU vs whole-node |
| B2 | `packing` | GPUs allocated on seeded traces: whole-node, Spread, Pack, exact optimum |
| B3 | `observe` | the agent's `observe()` on 1,250-10,000 nodes |
| B4 | `simulate` | simulated seconds per wall second of the simulated fleet |
| B5 | `simulate` | replicas left Pending by misprediction (Spread/Pack x Spread/Pack) |

Layering: like `sim`, this package may import sim, controller, agent, api, store, cel and core,
never kube. The exact optimum needs the optional `highspy`; everything else is stdlib plus the
project.
"""
