# A version the mirror downloaded since it started is imported by the
# mirror's management URL, the model and the version.
terraform import llmgw_mirror_weights.qwen https://models.internal:8082/qwen2.5-14b-instruct/2026-03
