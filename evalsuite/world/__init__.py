"""The synthetic COCO-format world: 12 real COCO categories drawn as glyphs, COCO json, MME/POPE sets.

Entry points: `evalsuite.world.build.build_world`, `evalsuite.world.layout.CocoLayout`,
`evalsuite.world.pope.build_pope`, `evalsuite.world.vocab.corpus`.
"""
