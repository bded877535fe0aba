"""What several test files share: real runs saved once, synthetic reports, namespaces, a browser."""
