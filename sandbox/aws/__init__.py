"""The sandbox AWS endpoint: moto behind a front that adds what moto lacks (placement groups,
capacity reservations and blocks, instance topology, console host keys), boots a sandbox node
per instance, and takes scripted faults. See server.py for the routes, faults.py for faults."""

from sandbox.aws.endpoint import AwsEndpoint, start_in_thread

__all__ = ["AwsEndpoint", "start_in_thread"]
