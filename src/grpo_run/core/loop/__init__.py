"""core/loop"""
