"""pdlift's EC2 capacity adapter reads DescribeCapacityBlockOfferings across every page: the
earliest offering in the blueprint's zone may be on the last one (one offering a page here)."""

from __future__ import annotations

import datetime as dt

import pytest

from sandbox.aws.config import AwsConfig
from tasks.adapters.ec2_capacity import Ec2Capacity

ONE_A_PAGE = AwsConfig(reservation_pending_seconds=0.0, capacity_block_page_size=1)


@pytest.mark.parametrize("aws_config", [ONE_A_PAGE])
def test_every_page_of_offerings_is_read(ec2):
    request = {"InstanceType": "p5en.48xlarge", "InstanceCount": 4, "CapacityDurationHours": 24,
               "StartDateRange": dt.datetime.now(dt.timezone.utc)}
    first_page = ec2.describe_capacity_block_offerings(**request)["CapacityBlockOfferings"]
    found = Ec2Capacity(ec2, ec2).capacity_block_offerings(request)

    assert len(first_page) == 1 and first_page[0]["AvailabilityZone"] == "us-east-2a"
    assert len(found) == 6 and len({o["CapacityBlockOfferingId"] for o in found}) == 6
    earliest_b = min((o for o in found if o["AvailabilityZone"] == "us-east-2b"), key=lambda o: o["StartDate"])
    assert earliest_b["StartDate"] == found[0]["StartDate"]  # as early as the first page's, in the other zone
