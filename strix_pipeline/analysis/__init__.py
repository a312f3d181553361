"""What the warehouse's numbers mean: change points on typed series (changepoints), the switch
criteria and verdict (decision), the trend charts (charts) and the webhook (notify). Each reads the
warehouse's read model (views.sql), never raw tables."""
