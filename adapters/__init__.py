"""Adapters: one module per neighbouring system (vLLM writer, torch tensors, rollout
packing, response decoding). Installed as ``objstore_payload.adapters``; each adapter
depends on the core, never the other way round."""
