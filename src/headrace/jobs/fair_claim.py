"""Which unfinished jobs a runner pool takes next, fairly across tenants (issue 39 item 3):
pure policy, no store.

Oldest-first let one tenant's queue of jobs fill every runner slot while the others waited
(``claimable`` returns the oldest jobs of all tenants). Now the next job is the oldest job
of the tenant with the fewest jobs running (cluster-wide, every pool's leases counted), so
slots go round the tenants: with T tenants waiting and S slots, each gets S / T, whatever
the length of its queue. A tenant alone still gets every slot (nothing is held back).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

J = TypeVar("J")


def fair_order(
    candidates: Sequence[J], running: Mapping[str, int], tenant_of: Callable[[J], str]
) -> list[J]:
    """``candidates`` (oldest first) in the order to take them: each time, the oldest job
    of the tenant with the fewest running (counting those taken before it); ties go to the
    tenant whose oldest job is older."""
    queues: dict[str, list[J]] = {}
    for job in candidates:
        queues.setdefault(tenant_of(job), []).append(job)
    load = Counter(running)
    age = {tenant: i for i, tenant in enumerate(queues)}  # by its oldest candidate
    order: list[J] = []
    while queues:
        tenant = min(queues, key=lambda t: (load[t], age[t]))
        order.append(queues[tenant].pop(0))
        load[tenant] += 1
        if not queues[tenant]:
            del queues[tenant]
    return order
