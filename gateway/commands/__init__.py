"""The built-in slash commands, one small unit each (a class holding only the parts it reads),
built and registered by the composition root; none runs a model turn of the chat's own."""
