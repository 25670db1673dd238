"""core/data"""
