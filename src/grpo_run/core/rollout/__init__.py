"""core/rollout"""
