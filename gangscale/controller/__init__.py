"""The async loop: batch, order, actuate, write conditions, bookings, scale-down."""
