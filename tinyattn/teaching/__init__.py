"""Code written to be read first: the ideas of tinyattn without the library around them.

`engine`: the backward walk in one sitting, tested to give the production engine's gradients.
Nothing in tinyattn imports this package; it imports tinyattn.
"""
