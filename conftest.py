pytest_plugins = ["integration.harness.pytest_plugin"]
