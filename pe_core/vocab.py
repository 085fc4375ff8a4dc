"""Token ids that the data and the models agree on, in a module that neither package owns.

The learned tokenizers (datamodules/text.py) put `SPECIAL_TOKENS` first, so their ids are fixed; the
translation data begins a target with [CLS] and ends it with [SEP], which the decoder needs to generate.
"""

SPECIAL_TOKENS = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"]  # ids 0..4; [UNK] for unseen chars/words
PAD, CLS, SEP, MASK, UNK = range(len(SPECIAL_TOKENS))
BOS, EOS = CLS, SEP  # translation: begin and end of a target
IGNORE_INDEX = -100  # a target that carries no loss (F.cross_entropy's default ignore_index)
