"""Shared test helpers, one module per thing they help with: configs, synthetic runs, trees and laws."""
