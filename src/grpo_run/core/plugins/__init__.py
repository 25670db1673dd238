"""core/plugins"""
