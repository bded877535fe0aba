"""The rank side: what runs in every rank, from joining the group to handing rank 0's report back."""
