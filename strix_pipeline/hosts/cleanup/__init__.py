"""What a Docker host keeps held to a budget: compile caches, images no series needs, probe images, and
the disk a run's pulls will take."""
