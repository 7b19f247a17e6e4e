"""What a scheduler imports: :class:`LeapClient` (submit a job, get its ranking) and
:class:`RankingSubscriber` (hand every ranking to a policy).

The implementation and its example are in :mod:`leap_stream.streaming.client`.
"""

from leap_stream.streaming.client import LeapClient, RankingSubscriber

__all__ = ["LeapClient", "RankingSubscriber"]
