"""Token-budget admission: a request's reservation against its tenant's rules (ratelimit/), the
ticket it holds, top-ups of metered streams, settlement, and speculative admission.
"""

from __future__ import annotations

from gateway.budget.admission import Admissions, Ticket

__all__ = ["Admissions", "Ticket"]
