"""core/learner"""
